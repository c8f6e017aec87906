/*
 * Two threads whose kernel waits are known: "sleeper" sleeps 0.5 ms
 * (nanosleep) and then writes a byte into a pipe; "reader" blocks reading
 * that pipe. Each makes a CPU idle about once per round, in do_nanosleep
 * and in the pipe's read. For idleflow's kernel-stack tests.
 *
 * Usage: pipewait [rounds]   (default 2000)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
static int rounds = 2000;

static void *reader(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "reader");
    char c;
    for (int i = 0; i < rounds; i++)
        if (read(fds[0], &c, 1) != 1)
            break;
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1)
        rounds = atoi(argv[1]);
    if (pipe(fds) != 0)
        return 1;
    pthread_setname_np(pthread_self(), "sleeper");
    pthread_t t;
    if (pthread_create(&t, 0, reader, 0) != 0)
        return 1;
    struct timespec ts = {0, 500000};
    for (int i = 0; i < rounds; i++) {
        nanosleep(&ts, 0);
        if (write(fds[1], "x", 1) != 1)
            return 1;
    }
    pthread_join(t, 0);
    return 0;
}
