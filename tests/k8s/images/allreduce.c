/* allreduce N ITERS: MPI_Allreduce (sum) of a vector of N doubles, ITERS times, timed; every rank checks its
 * result against the sum it computes itself (element i of rank r's vector is r + 1 + i % 7, so the sum over
 * P ranks is P(P+1)/2 + P * (i % 7)). Prints one line per rank:
 *   allreduce rank R of P on HOST: N doubles x ITERS, ok|BAD (first bad element), T s
 * and exits 1 on a rank whose result is wrong (mpirun then fails). For tests/k8s/collective.sh. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, len, iters, n, bad = -1;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    n = argc > 1 ? atoi(argv[1]) : 262144;
    iters = argc > 2 ? atoi(argv[2]) : 3;
    if (n <= 0 || iters <= 0) {
        fprintf(stderr, "allreduce: usage: allreduce N ITERS (both > 0)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double *in = malloc(sizeof(double) * (size_t)n), *out = malloc(sizeof(double) * (size_t)n);
    if (!in || !out) {
        fprintf(stderr, "allreduce: rank %d: no memory for %d doubles\n", rank, n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int i = 0; i < n; i++)
        in[i] = rank + 1 + i % 7;
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int k = 0; k < iters; k++)
        MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t = MPI_Wtime() - t;
    for (int i = 0; i < n && bad < 0; i++)
        if (out[i] != size * (size + 1) / 2.0 + (double)size * (i % 7))
            bad = i;
    if (bad < 0)
        printf("allreduce rank %d of %d on %s: %d doubles x %d, ok, %.3f s\n", rank, size, host, n, iters, t);
    else
        printf("allreduce rank %d of %d on %s: %d doubles x %d, BAD at %d: %g, %.3f s\n", rank, size, host, n,
               iters, bad, out[bad], t);
    fflush(stdout);
    free(in);
    free(out);
    MPI_Finalize();
    return bad < 0 ? 0 : 1;
}
