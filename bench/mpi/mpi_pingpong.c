/* A ping-pong between ranks 0 and 1 for mpi_bench: for each size, a
 * warm-up, then `rounds` rounds of `iters` round trips; each round's mean
 * half round trip. Rank 0 prints one line per size:
 *
 *     size <bytes> median_us <m> min_us <lo> max_us <hi>
 *
 * Arguments: <iters> <rounds> <size>... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: mpi_pingpong <iters> <rounds> <size>...\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]), rounds = atoi(argv[2]);
    double *t = malloc(sizeof(double) * (size_t)rounds);
    for (int a = 3; a < argc; a++) {
        size_t n = strtoul(argv[a], NULL, 10);
        char *b = malloc(n ? n : 1);
        memset(b, 1, n ? n : 1);
        int warm = iters / 10 + 1;
        for (int r = -1; r < rounds; r++) {
            int k = r < 0 ? warm : iters;
            MPI_Barrier(MPI_COMM_WORLD);
            double start = MPI_Wtime();
            for (int i = 0; i < k; i++) {
                if (rank == 0) {
                    MPI_Send(b, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(b, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    MPI_Recv(b, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(b, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
                }
            }
            if (r >= 0) t[r] = (MPI_Wtime() - start) * 1e6 / (2.0 * k);
        }
        if (rank == 0) {
            qsort(t, (size_t)rounds, sizeof(double), cmp);
            printf("size %zu median_us %.3f min_us %.3f max_us %.3f\n", n, t[rounds / 2], t[0], t[rounds - 1]);
            fflush(stdout);
        }
        free(b);
    }
    free(t);
    MPI_Finalize();
    return 0;
}
