/* An MPI program that checks what Open MPI's `mtl ofi` asks of a
 * provider, run by psmrail-fi/tests/mpi.rs under mpirun over psmrail's
 * providers: point-to-point messages of every size (data checked),
 * wildcard receives (MPI_ANY_SOURCE, MPI_ANY_TAG) with their status,
 * probe, matched probe (MPI_Mprobe / MPI_Mrecv), synchronous sends,
 * cancel of a posted receive, nonblocking
 * traffic between every pair, and collectives on top.
 *
 * Prints "mpi_check: ok <ranks>" from rank 0 when everything held; any
 * failure prints what and where, and aborts the job with code 3.
 *
 * MPI_CHECK_NO_SSEND=1 sends with MPI_Send where MPI_Ssend would be used:
 * libfabric 1.17's ofi_rxd (what Open MPI layers over a DGRAM provider)
 * crashes on Open MPI's synchronous-send acknowledgement, over its own
 * udp provider as over psm. MPI_CHECK_NO_MPROBE=1 leaves the matched
 * probes out: over ofi_rxd (ofi_rxd claims the message, not the provider
 * below it) about one run in fifty never leaves the barrier after them. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "mpi_check: rank %d: ", rank);                 \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);             \
            MPI_Abort(MPI_COMM_WORLD, 3);                                  \
        }                                                                  \
    } while (0)

/* The byte at `i` of a message from `from` of length `n`. */
static unsigned char pattern(int from, size_t n, size_t i) {
    return (unsigned char)(from * 31 + n * 7 + i * 13);
}

static void fill(unsigned char *b, int from, size_t n) {
    for (size_t i = 0; i < n; i++) b[i] = pattern(from, n, i);
}

static void verify(const unsigned char *b, int from, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        CHECK(b[i] == pattern(from, n, i), "%s: %zu-byte message from %d differs at byte %zu", what, n, from, i);
}

/* Ping-pong between ranks 0 and 1 over every size up to 4 MiB (powers
 * of two and their neighbours), the reply received with wildcards. */
static void sizes(void) {
    static const size_t max = 4u << 20;
    unsigned char *b = malloc(max + 1);
    CHECK(b, "malloc");
    for (size_t p = 1; p <= max; p *= 2) {
        size_t ns[3] = {p - 1, p, p + 1};
        for (int k = 0; k < 3; k++) {
            size_t n = ns[k];
            if (n > max) continue;
            if (rank == 0) {
                fill(b, 0, n);
                MPI_Send(b, (int)n, MPI_BYTE, 1, 100 + k, MPI_COMM_WORLD);
                memset(b, 0, n + 1);
                MPI_Status st;
                MPI_Recv(b, (int)n + 1, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                int count;
                MPI_Get_count(&st, MPI_BYTE, &count);
                CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 200 + k && (size_t)count == n,
                      "reply of %zu bytes: source %d tag %d count %d", n, st.MPI_SOURCE, st.MPI_TAG, count);
                verify(b, 1, n, "reply");
            } else if (rank == 1) {
                MPI_Recv(b, (int)n, MPI_BYTE, 0, 100 + k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                verify(b, 0, n, "ping");
                fill(b, 1, n);
                MPI_Send(b, (int)n, MPI_BYTE, 0, 200 + k, MPI_COMM_WORLD);
            }
        }
    }
    free(b);
    /* The other ranks' next messages must not meet the wildcards above. */
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Every rank sends rank 0 a message with its own tag; rank 0 takes them
 * with MPI_ANY_SOURCE after probing each for its size. */
static void wildcards_and_probe(void) {
    if (rank == 0) {
        int seen = 0;
        for (int i = 1; i < size; i++) {
            MPI_Status st;
            MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int count;
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(st.MPI_TAG == 1000 + st.MPI_SOURCE && count == st.MPI_SOURCE * 10,
                  "probe: source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, count);
            int *v = malloc(sizeof(int) * (size_t)(count + 1));
            MPI_Recv(v, count, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int j = 0; j < count; j++)
                CHECK(v[j] == st.MPI_SOURCE + j, "probed message from %d: item %d", st.MPI_SOURCE, j);
            free(v);
            CHECK(!(seen & (1 << st.MPI_SOURCE)), "rank %d seen twice", st.MPI_SOURCE);
            seen |= 1 << st.MPI_SOURCE;
        }
        int flag = 1;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        CHECK(!flag, "a message left after every rank's was received");
    } else {
        int count = rank * 10;
        int *v = malloc(sizeof(int) * (size_t)count);
        for (int j = 0; j < count; j++) v[j] = rank + j;
        if (getenv("MPI_CHECK_NO_SSEND"))
            MPI_Send(v, count, MPI_INT, 0, 1000 + rank, MPI_COMM_WORLD);
        else
            MPI_Ssend(v, count, MPI_INT, 0, 1000 + rank, MPI_COMM_WORLD);
        free(v);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Matched probes (MPI_Mprobe / MPI_Mrecv: libfabric's FI_CLAIM): every
 * rank sends rank 0 a small message and a large one (sent by rendezvous);
 * rank 0 claims each with MPI_ANY_SOURCE and receives exactly it. */
static void matched_probe(void) {
    enum { SMALL = 10, LARGE = 256 * 1024 };
    if (rank == 0) {
        for (int i = 0; i < 2 * (size - 1); i++) {
            MPI_Message msg;
            MPI_Status st;
            MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
            int count;
            MPI_Get_count(&st, MPI_INT, &count);
            int src = st.MPI_SOURCE;
            int large = st.MPI_TAG == 3000 + src;
            CHECK(large || st.MPI_TAG == 2000 + src, "mprobe: source %d tag %d", src, st.MPI_TAG);
            CHECK(count == (large ? LARGE : SMALL), "mprobe: %d items from %d", count, src);
            int *v = malloc(sizeof(int) * (size_t)count);
            MPI_Mrecv(v, count, MPI_INT, &msg, &st);
            CHECK(st.MPI_SOURCE == src, "mrecv: source %d, probed %d", st.MPI_SOURCE, src);
            for (int j = 0; j < count; j++)
                CHECK(v[j] == src * 7 + j, "claimed message from %d: item %d", src, j);
            free(v);
        }
    } else {
        int *v = malloc(sizeof(int) * LARGE);
        for (int j = 0; j < LARGE; j++) v[j] = rank * 7 + j;
        MPI_Send(v, SMALL, MPI_INT, 0, 2000 + rank, MPI_COMM_WORLD);
        MPI_Send(v, LARGE, MPI_INT, 0, 3000 + rank, MPI_COMM_WORLD);
        free(v);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A receive nobody matches is cancelled; the next one still works. */
static void cancel(void) {
    int x = 0;
    MPI_Request r;
    MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 4242, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Status st;
    MPI_Wait(&r, &st);
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "a receive nobody matched was not cancelled");
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Every rank sends to every other at once, nonblocking. */
static void all_pairs(void) {
    enum { N = 4096 };
    int *out = malloc(sizeof(int) * N * (size_t)size), *in = malloc(sizeof(int) * N * (size_t)size);
    MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * (size_t)size);
    int k = 0;
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        MPI_Irecv(in + N * p, N, MPI_INT, p, 7, MPI_COMM_WORLD, &rq[k++]);
    }
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        for (int j = 0; j < N; j++) out[N * p + j] = rank * 1000003 + p * 101 + j;
        MPI_Isend(out + N * p, N, MPI_INT, p, 7, MPI_COMM_WORLD, &rq[k++]);
    }
    MPI_Waitall(k, rq, MPI_STATUSES_IGNORE);
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        for (int j = 0; j < N; j++)
            CHECK(in[N * p + j] == p * 1000003 + rank * 101 + j, "all pairs: from %d item %d", p, j);
    }
    free(out); free(in); free(rq);
}

static void collectives(void) {
    long v = rank + 1, sum = 0;
    MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == (long)size * (size + 1) / 2, "allreduce gave %ld", sum);
    enum { B = 1 << 20 };
    unsigned char *b = malloc(B);
    if (rank == 0) fill(b, 0, B);
    MPI_Bcast(b, B, MPI_BYTE, 0, MPI_COMM_WORLD);
    verify(b, 0, B, "bcast");
    free(b);
    int *s = malloc(sizeof(int) * (size_t)size), *r = malloc(sizeof(int) * (size_t)size);
    for (int p = 0; p < size; p++) s[p] = rank * 100 + p;
    MPI_Alltoall(s, 1, MPI_INT, r, 1, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < size; p++) CHECK(r[p] == p * 100 + rank, "alltoall from %d gave %d", p, r[p]);
    free(s); free(r);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs at least two ranks");
    sizes();
    wildcards_and_probe();
    if (!getenv("MPI_CHECK_NO_MPROBE"))
        matched_probe();
    cancel();
    all_pairs();
    collectives();
    if (rank == 0) printf("mpi_check: ok %d\n", size);
    MPI_Finalize();
    return 0;
}
