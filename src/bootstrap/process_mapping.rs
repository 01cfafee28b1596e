//! `PMI_process_mapping`, the job attribute in which MPICH's hydra and
//! Slurm say which node each rank runs on: `(vector,(n,c,r),...)`, each
//! triple `c` nodes from node `n` taking `r` consecutive ranks each; the
//! blocks repeat, in order, until every rank has a node. The PMI-2
//! client reads a rank's local rank and the node's count from it when the
//! launcher's environment does not say.

/// This rank's index among the ranks of its node, and their count, from
/// `mapping` for a job of `size` ranks; `None` for text that is no
/// mapping (or one that places no rank).
///
/// ```
/// use psmrail::bootstrap::process_mapping::local_rank_and_size;
///
/// // Two nodes, two ranks each in turn: 0 1 | 2 3 | 4 5 on 0, 1, 0.
/// assert_eq!(local_rank_and_size("(vector,(0,2,2))", 6, 4), Some((2, 4)));
/// assert_eq!(local_rank_and_size("(vector,(0,2,2))", 6, 3), Some((1, 2)));
/// ```
pub fn local_rank_and_size(mapping: &str, size: usize, rank: usize) -> Option<(usize, usize)> {
    if rank >= size {
        return None;
    }
    let blocks = parse(mapping)?;
    let node_of = |r: usize| -> usize {
        // Ranks per round of the blocks, then the block within the round.
        let round: usize = blocks.iter().map(|&(_, count, per)| count * per).sum();
        let mut at = r % round;
        for &(start, count, per) in &blocks {
            if at < count * per {
                return start + at / per;
            }
            at -= count * per;
        }
        unreachable!("a rank within a round falls in a block")
    };
    let mine = node_of(rank);
    let local: Vec<usize> = (0..size).filter(|&r| node_of(r) == mine).collect();
    let index = local.iter().position(|&r| r == rank)?;
    Some((index, local.len()))
}

/// The `(node, count, ranks per node)` triples; none empty.
fn parse(mapping: &str) -> Option<Vec<(usize, usize, usize)>> {
    let inner = mapping
        .trim()
        .strip_prefix('(')?
        .strip_suffix(')')?
        .trim()
        .strip_prefix("vector")?;
    let mut blocks = Vec::new();
    for part in inner.split('(').skip(1) {
        let triple = part.split(')').next()?;
        let n: Vec<usize> = triple
            .split(',')
            .map(|x| x.trim().parse().ok())
            .collect::<Option<_>>()?;
        match n[..] {
            [start, count, per] if count > 0 && per > 0 => blocks.push((start, count, per)),
            _ => return None,
        }
    }
    (!blocks.is_empty()).then_some(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_holds_every_rank() {
        // What hydra says for -n 4 on one host.
        for r in 0..4 {
            assert_eq!(local_rank_and_size("(vector,(0,1,1))", 4, r), Some((r, 4)));
        }
    }

    #[test]
    fn blocks_repeat_until_every_rank_is_placed() {
        // Node 0 takes 3, node 1 takes 1, then again: 0 0 0 1 0 0 0 1.
        let m = "(vector,(0,1,3),(1,1,1))";
        assert_eq!(local_rank_and_size(m, 8, 3), Some((0, 2)));
        assert_eq!(local_rank_and_size(m, 8, 7), Some((1, 2)));
        assert_eq!(local_rank_and_size(m, 8, 4), Some((3, 6)));
    }

    #[test]
    fn text_that_is_no_mapping_gives_nothing() {
        for bad in [
            "",
            "(vector)",
            "(vector,(0,1))",
            "(vector,(0,0,1))",
            "(list,(0,1,1))",
            "(vector,(a,1,1))",
        ] {
            assert_eq!(local_rank_and_size(bad, 4, 0), None, "{bad:?}");
        }
        assert_eq!(local_rank_and_size("(vector,(0,1,1))", 4, 4), None);
    }
}
