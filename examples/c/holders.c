/*
 * Workloads whose wait chains are known, for idleflow's root causes
 * (report "Root causes of idle", JSON `root_causes`). Each mode runs for
 * the given seconds (default 2) on whatever CPUs there are:
 *
 *   hop1    handler x4 lock `catalog` briefly; `writer` holds it while it
 *           sleeps 10 ms in commit_batch(): root = the writer's sleep (timer),
 *           chain handler-* -> writer.
 *   chain3  handler x4 wait for `catalog`, held by `indexer` while it waits
 *           in index_one() for `journal`, held by `writer` sleeping in
 *           commit_batch(): root = the writer's sleep, chain handler-* ->
 *           indexer -> writer.
 *   condvar consumer x4 wait on a condition variable for items that
 *           `producer` queues after each read of a loopback TCP socket in
 *           read_request(); `client` writes one byte every 2 ms: root = the
 *           producer's socket read, ended by the network (softirq), chain
 *           consumer-* -> producer.
 *   fsync   handler x2 (one per CPU, mostly working outside the lock) wait
 *           for `journal`, held by `writer` while it writes 4 MiB to a real
 *           file and fsyncs it in sync_journal(): root = the disk.
 *   convoy  teller x4 each post to an account of their own (0.2 ms of work,
 *           then a 1 ms sleep) until a moment drawn at random 1.5-3 s after
 *           the start, then all to `ledger` in post_entry() (0.3 ms of work
 *           under the lock, 0.2 ms outside): a lock convoy, each unlock
 *           waking the next teller, which takes the lock before the one
 *           that woke it comes back. Prints the convoy's start first:
 *           "convoy at NS" (CLOCK_MONOTONIC); a run shorter than that has
 *           no convoy.
 *
 * Built -O2 -g -fomit-frame-pointer.  Usage: holders MODE [seconds] [file]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static pthread_mutex_t catalog = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t journal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ledger = PTHREAD_MUTEX_INITIALIZER;
static long convoy_at;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static volatile int stop;
static volatile long work;
static int queued;
static const char *journal_path = "holders.journal";

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

NOINLINE static void spin(long ns) {
    long until = now_ns() + ns;
    while (now_ns() < until)
        work++;
}

NOINLINE static void commit_batch(void) {
    struct timespec ten_ms = {0, 10000000};
    nanosleep(&ten_ms, NULL);
}

/* Writes 4 MiB straight to the disk and waits for it to have them. */
static char block[4 * 1024 * 1024] __attribute__((aligned(4096)));

NOINLINE static void sync_journal(int fd) {
    if (pwrite(fd, block, sizeof block, 0) < 0)
        perror("write");
    fsync(fd);
}

NOINLINE static void serve(void) {
    pthread_mutex_lock(&catalog);
    spin(10000);
    pthread_mutex_unlock(&catalog);
}

NOINLINE static void index_one(void) {
    pthread_mutex_lock(&catalog);
    pthread_mutex_lock(&journal);
    spin(10000);
    pthread_mutex_unlock(&journal);
    pthread_mutex_unlock(&catalog);
}

static void *handler(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "handler-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    while (!stop) {
        serve();
        spin(10000);
    }
    return NULL;
}

static void *journal_handler(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "handler-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    while (!stop) {
        pthread_mutex_lock(&journal);
        spin(5000);
        pthread_mutex_unlock(&journal);
        spin(200000);
    }
    return NULL;
}

static void *indexer(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "indexer");
    while (!stop) {
        index_one();
        spin(20000);
    }
    return NULL;
}

/* Holds `lock` while it sleeps in commit_batch(), then lets go for a moment; on CPU 0 (its timer fires there: seen by every kernel). */
static void *writer(void *arg) {
    pthread_mutex_t *lock = arg;
    prctl(PR_SET_NAME, "writer"); cpu_set_t cpu0; CPU_ZERO(&cpu0); CPU_SET(0, &cpu0); pthread_setaffinity_np(pthread_self(), sizeof cpu0, &cpu0);
    while (!stop) {
        pthread_mutex_lock(lock);
        commit_batch();
        pthread_mutex_unlock(lock);
        spin(50000);
    }
    return NULL;
}

static void *fsync_writer(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "writer");
    memset(block, 'j', sizeof block);
    /* O_DIRECT: the disk's time, not the page cache's copying. */
    int fd = open(journal_path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0)
        fd = open(journal_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(journal_path);
        exit(2);
    }
    while (!stop) {
        pthread_mutex_lock(&journal);
        sync_journal(fd);
        pthread_mutex_unlock(&journal);
        spin(50000);
    }
    close(fd);
    unlink(journal_path);
    return NULL;
}

NOINLINE static void post_own(void) {
    struct timespec one_ms = {0, 1000000};
    spin(200000);
    nanosleep(&one_ms, NULL);
}

NOINLINE static void post_entry(void) {
    pthread_mutex_lock(&ledger);
    spin(300000);
    pthread_mutex_unlock(&ledger);
}

static void *teller(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "teller-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    while (!stop) {
        if (now_ns() < convoy_at) {
            post_own();
        } else {
            post_entry();
            spin(200000);
        }
    }
    return NULL;
}

static int listener, port;

NOINLINE static int read_request(int fd) {
    char c;
    return (int)read(fd, &c, 1);
}

static void *producer(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "producer");
    int fd = accept(listener, NULL, NULL);
    while (!stop && read_request(fd) > 0) {
        pthread_mutex_lock(&qlock);
        queued += 4;
        pthread_cond_broadcast(&qcond);
        pthread_mutex_unlock(&qlock);
    }
    close(fd);
    return NULL;
}

static void *consumer(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "consumer-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    while (!stop) {
        pthread_mutex_lock(&qlock);
        while (queued == 0 && !stop)
            pthread_cond_wait(&qcond, &qlock);
        if (queued > 0)
            queued--;
        pthread_mutex_unlock(&qlock);
        spin(20000);
    }
    return NULL;
}

static void *client(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "client");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("connect");
        exit(2);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timespec two_ms = {0, 2000000};
    while (!stop) {
        nanosleep(&two_ms, NULL);
        if (write(fd, "r", 1) != 1)
            break;
    }
    close(fd);
    return NULL;
}

static void listen_loopback(void) {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listener, (struct sockaddr *)&a, sizeof a) < 0 || listen(listener, 1) < 0 ||
        getsockname(listener, (struct sockaddr *)&a, &len) < 0) {
        perror("listen");
        exit(2);
    }
    port = ntohs(a.sin_port);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: holders hop1|chain3|condvar|fsync|convoy [seconds] [file]\n");
        return 2;
    }
    const char *mode = argv[1];
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    if (argc > 3)
        journal_path = argv[3];
    pthread_t t[8];
    int n = 0;
    if (!strcmp(mode, "hop1")) {
        pthread_create(&t[n++], NULL, writer, &catalog);
        for (long i = 0; i < 4; i++)
            pthread_create(&t[n++], NULL, handler, (void *)i);
    } else if (!strcmp(mode, "chain3")) {
        pthread_create(&t[n++], NULL, writer, &journal);
        pthread_create(&t[n++], NULL, indexer, NULL);
        for (long i = 0; i < 4; i++)
            pthread_create(&t[n++], NULL, handler, (void *)i);
    } else if (!strcmp(mode, "condvar")) {
        listen_loopback();
        pthread_create(&t[n++], NULL, producer, NULL);
        pthread_create(&t[n++], NULL, client, NULL);
        for (long i = 0; i < 4; i++)
            pthread_create(&t[n++], NULL, consumer, (void *)i);
    } else if (!strcmp(mode, "fsync")) {
        pthread_create(&t[n++], NULL, fsync_writer, NULL);
        for (long i = 0; i < 2; i++)
            pthread_create(&t[n++], NULL, journal_handler, (void *)i);
    } else if (!strcmp(mode, "convoy")) {
        unsigned seed = (unsigned)(now_ns() ^ getpid());
        convoy_at = now_ns() + 1500000000L + (long)(rand_r(&seed) % 1500) * 1000000L;
        printf("convoy at %ld\n", convoy_at);
        fflush(stdout);
        for (long i = 1; i <= 4; i++)
            pthread_create(&t[n++], NULL, teller, (void *)i);
    } else {
        fprintf(stderr, "holders: unknown mode %s\n", mode);
        return 2;
    }
    struct timespec run = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&run, NULL);
    stop = 1;
    pthread_mutex_lock(&qlock);
    pthread_cond_broadcast(&qcond);
    pthread_mutex_unlock(&qlock);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return 0;
}
