/* Single-core memcpy rate, the physical reference for bench/run.sh.
 *
 *   memcpy_bw SIZE [SPAN] [SECONDS]
 *
 * Copies SIZE bytes from one buffer to another, over and over, for SECONDS (default 0.3) and
 * prints MiB/s (2^20 bytes per second) on one line. With SPAN > SIZE both buffers are SPAN
 * bytes long and each copy takes the next SIZE-byte slice, so the data comes from DRAM rather
 * than from cache (SPAN 256 MiB is far larger than any cache here). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SIZE [SPAN] [SECONDS]\n", argv[0]);
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    size_t span = argc > 2 ? strtoull(argv[2], NULL, 0) : size;
    double secs = argc > 3 ? atof(argv[3]) : 0.3;
    if (size == 0 || span < size) {
        fprintf(stderr, "SIZE must be > 0 and SPAN >= SIZE\n");
        return 2;
    }
    size_t slots = span / size;
    unsigned char *src = aligned_alloc(4096, (slots * size + 4095) / 4096 * 4096);
    unsigned char *dst = aligned_alloc(4096, (slots * size + 4095) / 4096 * 4096);
    if (!src || !dst) {
        perror("aligned_alloc");
        return 2;
    }
    memset(src, 0x5a, slots * size);
    memset(dst, 0xa5, slots * size);
    /* Batches grow until one takes ~1 ms, so the clock is read rarely. */
    uint64_t batch = 1, done = 0;
    size_t slot = 0;
    double t0 = now(), tb = t0, t;
    for (;;) {
        for (uint64_t i = 0; i < batch; i++) {
            memcpy(dst + slot * size, src + slot * size, size);
            /* Keep the compiler from dropping or merging the copies. */
            __asm__ __volatile__("" : : "r"(dst) : "memory");
            if (++slot == slots) slot = 0;
        }
        done += batch;
        double tn = now();
        t = tn - t0;
        if (t >= secs) break;
        if (tn - tb < 1e-3 && batch < (1u << 30)) batch *= 2;
        tb = tn;
    }
    printf("%.2f\n", (double)done * (double)size / t / 1048576.0);
    return 0;
}
