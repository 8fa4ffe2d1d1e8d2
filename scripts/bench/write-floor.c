// The floor under a journal commit: what the kernel alone charges for one write plus one
// fdatasync of a commit's size, with no user-space work around it. docs/results.md quotes it
// to show how much of a commit on /dev/shm is the system calls, and what the mirror block
// (a second 4 KiB page in every commit's write) adds.
//
//   gcc -O2 -o /tmp/write-floor scripts/bench/write-floor.c
//   /tmp/write-floor /dev/shm/write-floor.img [COMMITS]      # then remove the file
//
// Each size is written COMMITS times (default 2,000,000), each write 152 bytes after the
// last as a journal's records are, pwrite + fdatasync, then again with one pwritev2 call
// carrying RWF_DSYNC. Prints nanoseconds per commit.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [COMMITS]  (FILE is created and overwritten)\n", argv[0]);
        return 2;
    }
    long n = argc > 2 ? atol(argv[2]) : 2000000;
    if (n <= 0) {
        fprintf(stderr, "%s: COMMITS must be a positive number\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, 64 << 20) != 0) {
        perror(argv[1]);
        return 1;
    }
    static char buf[1 << 16];
    memset(buf, 1, sizeof buf);
    // A bare record (one page), and a record with its mirror on the next 4 KiB boundary.
    const int sizes[] = {152, 4336};
    for (int s = 0; s < 2; s++) {
        for (int dsync = 0; dsync < 2; dsync++) {
            off_t off = 0;
            double t = now();
            for (long i = 0; i < n; i++) {
                ssize_t wrote;
                if (dsync) {
                    struct iovec io = {buf, (size_t)sizes[s]};
                    wrote = pwritev2(fd, &io, 1, off, RWF_DSYNC);
                } else {
                    wrote = pwrite(fd, buf, sizes[s], off);
                    if (wrote == sizes[s] && fdatasync(fd) != 0)
                        wrote = -1;
                }
                if (wrote != sizes[s]) {
                    perror(argv[1]);
                    return 1;
                }
                off += 152;
                if (off > (60 << 20))
                    off = 0;
            }
            printf("%5d bytes, %-17s %6.0f ns per commit\n", sizes[s],
                   dsync ? "pwritev2(DSYNC):" : "pwrite+fdatasync:", (now() - t) / n * 1e9);
        }
    }
    close(fd);
    return 0;
}
