/*
 * A worker whose idle-causing path is known: "worker" (on CPU 1) blocks
 * reading a pipe at the end of a chain of named functions,
 *     worker_main -> consume -> next_message -> fill_buffer -> read,
 * while "pacer" (on CPU 0) writes one byte into the pipe 0.5 ms after the
 * worker took the last one, spinning in between, so it never leaves its
 * CPU idle. The worker's CPU
 * goes idle each time it blocks in read: that chain is the program's only
 * idle-causing path (about 0.5 ms of idle per round).
 *
 * Built -O2 -fomit-frame-pointer: neither this program nor Debian's libc
 * keeps frame pointers, so only CFI unwinding finds the chain.
 *
 * Usage: chain [rounds]   (default 2000)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
static int rounds = 2000;
static volatile long consumed;
/* Messages the worker has taken: the pacer writes the next one only after
 * the worker took the last, so the worker blocks in read every round (it
 * never finds a queue of messages after the VM stole its CPU for a while). */
static int taken;

#define NOINLINE __attribute__((noinline))

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spins 0.5 ms: the pacer never blocks. */
NOINLINE static void pace(void) {
    long until = now_ns() + 500000;
    while (now_ns() < until)
        consumed++;
}

static void pin(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
}

/* Each level does work after its call, so no call is a tail call. */
NOINLINE static int fill_buffer(char *buf) {
    int n = (int)read(fds[0], buf, 1);
    consumed += n;
    return n;
}

NOINLINE static int next_message(char *buf) {
    int n = fill_buffer(buf);
    consumed += buf[0] == 'x';
    return n;
}

NOINLINE static int consume(void) {
    char buf[16];
    int n = next_message(buf);
    consumed += n;
    return n;
}

NOINLINE static void *worker_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "worker");
    if (sysconf(_SC_NPROCESSORS_ONLN) > 1)
        pin(1);
    for (int i = 0; i < rounds; i++) {
        if (consume() != 1)
            break;
        __atomic_store_n(&taken, i + 1, __ATOMIC_RELEASE);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1)
        rounds = atoi(argv[1]);
    pin(0);
    if (pipe(fds) != 0)
        return 1;
    pthread_setname_np(pthread_self(), "pacer");
    pthread_t t;
    if (pthread_create(&t, 0, worker_main, 0) != 0)
        return 1;
    for (int i = 0; i < rounds; i++) {
        while (__atomic_load_n(&taken, __ATOMIC_ACQUIRE) < i)
            sched_yield();
        pace();
        if (write(fds[1], "x", 1) != 1)
            return 1;
    }
    pthread_join(t, 0);
    return 0;
}
