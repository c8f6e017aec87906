/*
 * Two threads whose idle has known causes, for comparing runs (`idleflow
 * diff`, `idleflow history`): "flusher" computes for 100 µs and flushes its
 * log (flush_log: a sleep of FLUSH_US µs); "feeder" (the main thread)
 * sleeps 1 ms (feed) and prepares a request for 100 µs (prepare). Each has
 * a CPU to itself (the first and the last), so each CPU's idle follows its
 * own thread. A slower flush_log (a larger FLUSH_US) adds idle there and
 * leaves the feeder's as it was.
 *
 * Usage: stages [seconds] [flush_us]   (defaults 2 and 300)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile int done;
static long flush_us = 300;

/* The calling thread runs on `cpu` only (of the CPUs there are). */
static void pin(int cpu) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(n > 0 ? (cpu < 0 ? n - 1 : cpu % n) : 0, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void compute(double seconds) {
    double end = now_s() + seconds;
    while (now_s() < end) {
    }
}

__attribute__((noinline)) static void flush_log(void) {
    struct timespec ts = {0, flush_us * 1000};
    nanosleep(&ts, 0);
}

static void *flusher(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "flusher");
    pin(0);
    while (!done) {
        compute(100e-6);
        flush_log();
    }
    return 0;
}

__attribute__((noinline)) static void feed(void) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, 0);
}

__attribute__((noinline)) static void prepare(void) {
    compute(100e-6);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    if (argc > 2)
        flush_us = atol(argv[2]);
    pthread_setname_np(pthread_self(), "feeder");
    pin(-1);
    pthread_t f;
    if (pthread_create(&f, 0, flusher, 0) != 0)
        return 1;
    double end = now_s() + seconds;
    while (now_s() < end) {
        feed();
        prepare();
    }
    done = 1;
    pthread_join(f, 0);
    return 0;
}
