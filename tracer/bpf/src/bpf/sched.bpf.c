/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * idleflow's scheduler programs: one 32-byte record per context switch, per
 * waking and per new task's first wake-up, written in the kernel at the
 * scheduler's tracepoints into the ring buffer of the CPU it happened on.
 *
 * Layout (little-endian, 32 bytes; decoded by src/record.rs, which owns the
 * meaning of every field):
 *
 *   0  u64 time     bpf_ktime_get_ns(): CLOCK_MONOTONIC, when the program
 *                   starts (a switch with stacks: once they are taken)
 *   8  u8  kind     KIND_*
 *   9  u8  flags    switch: FLAG_PREEMPT, and at a switch to idle of a
 *                   Java thread FLAG_JAVA (+ _PENDING, _WAITING);
 *                   wake-ups: FLAG_CONTEXT_KNOWN
 *  10  u16 aux      switch: prev's exit_state; wake-ups: preempt_count >> 8
 *                   (its softirq, hardirq and NMI counts)
 *  12  u32 tid_a    switch: prev's tid;  wake-ups: the running task's (waker)
 *  16  u32 tgid_a   switch: prev's tgid; wake-ups: the running task's
 *  20  u32 tid_b    switch: next's tid;  wake-ups: the woken task's
 *  24  u32 tgid_b   switch: next's tgid; wake-ups: the woken task's
 *  28  u32 arg      switch: prev_state as the scheduler passed it;
 *                   wake-ups: target CPU (task_cpu of the woken task)
 *
 * Stacks (when user space asks for them; decoded by src/record.rs): a
 * switch that leaves a CPU idle, sampled under a per-CPU budget, and one
 * waking in `waker_one_in`, under a per-CPU budget of its own, are written
 * as a longer record: the 32 bytes above with FLAG_STACKS set, then
 *
 *  32  u32 kernel_bytes   bytes of kernel[] written (0: none)
 *  36  u32 user_bytes     bytes of the user stack copied (0: none)
 *  40  u32 user_asked     bytes the copy asked for (room after the head)
 *  44  u32 has_regs       bit 0: ip..di hold the thread's user registers;
 *                         bit 1: runs holds its count of runs
 *  48  u64 ip, sp, bp, di the user registers at the kernel's entry
 *                         bit 2: anchor holds its Java frame anchor
 *  80  u64 runs           the times the thread came onto a CPU so far
 *                         (sched_info.pcount): user space tells from it
 *                         whether a thread it reads later ran since
 *  88  u64 anchor[3]      a Java thread's last Java frame (sp, fp, pc),
 *                         read where `java_threads` says its JVM keeps it
 * 112  u64 monitor[3]     bit 3: the monitor it blocks entering, the one
 *                         it waits in (ObjectMonitor*, 0: none) and the
 *                         first one's owner word, as its JVM had them
 * 136  u64 blocker        bit 4: the class word (a compressed Klass*) of
 *                         the object its Thread.parkBlocker held (0: none)
 * 144  u64 kernel[48]     the kernel call chain, innermost first (it
 *                         starts in this program; user space strips the
 *                         tracing glue)
 * 528  u8  user[user_asked]  the top of the user stack, from sp up
 *
 * The stacks are those perf's samples would carry at the same switch or
 * waking: the leaving thread's (the waker's), with the user registers
 * saved when it entered the kernel; an interrupt's waking keeps the
 * kernel chain only. Which switches to idle and which wakings get stacks
 * is random, each with the same chance, the chance set per 100 ms window
 * so that a CPU takes about `idle_stack_budget` and `waker_stack_budget`
 * a second (`samplers`).
 *
 * Batches: a record without stacks first goes into its CPU's batch (a
 * per-CPU array of BATCH_RECORDS records), and the batch goes into the ring
 * as one ring record of n * 32 bytes (src/ringmap.rs splits it again) when
 * it is full, when its CPU goes idle, when its oldest record is STALE_NS
 * old at a later run, before a record with stacks, and when user space
 * asks (`flush_cpu`, run on the CPU by BPF_PROG_TEST_RUN: src/flush.rs):
 * a ring reservation and commit cost ~100 ns a record here, most of a
 * plain record's cost. `pending` (mmapped by user space) holds, per CPU,
 * the time of the oldest record its batch holds (0: none), so that the
 * reader knows which records are not in the rings yet.
 *
 * Invariants:
 * - every record goes into the ring of the CPU whose program wrote it, so
 *   CPUs never share a ring (nor its lock) and each ring is in the order
 *   the CPU reserved its records;
 * - a CPU's records reach its ring in the order it wrote them, but for a
 *   record written while `flush_cpu` interrupted a program of this CPU (or
 *   the other way round), which goes into the ring directly;
 * - a record that cannot be written is counted, never dropped silently:
 *   no ring for this CPU (no_ring) or the ring full (ring_full), per CPU in
 *   `counters`; a waking whose context could not be read is written with
 *   FLAG_CONTEXT_KNOWN clear and counted (context_unknown). Program runs
 *   the kernel skipped (recursion on one CPU) are the programs' own
 *   `recursion_misses`, read by user space;
 * - the reader is woken only when a record takes a ring's unread bytes
 *   past a multiple of `wakeup_bytes`: a wake-up per record would make
 *   records of its own (the reader's switch and waking) and feed itself,
 *   and cost an interrupt each while the reader waits for a CPU. The
 *   reader polls with a timeout for the rest.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

enum {
	KIND_SWITCH = 1,
	KIND_WAKING = 2,
	KIND_WAKEUP_NEW = 3,
};

enum {
	FLAG_PREEMPT = 1,
	FLAG_CONTEXT_KNOWN = 2,
	FLAG_STACKS = 4,
	/* A switch to idle of a Java thread whose monitor words were read: */
	FLAG_JAVA = 8,
	/* ...entering a contended monitor (its pending monitor set), */
	FLAG_JAVA_PENDING = 16,
	/* ...in Object.wait (its waiting monitor set). */
	FLAG_JAVA_WAITING = 32,
};

#define KERNEL_FRAMES 48

struct record {
	__u64 time;
	__u8 kind;
	__u8 flags;
	__u16 aux;
	__u32 tid_a;
	__u32 tgid_a;
	__u32 tid_b;
	__u32 tgid_b;
	__u32 arg;
};

_Static_assert(sizeof(struct record) == 32, "the record is 32 bytes");

/* A record with stacks: the record, this head, then the user stack copy. */
struct stack_record {
	struct record ev;
	__u32 kernel_bytes;
	__u32 user_bytes;
	__u32 user_asked;
	__u32 has_regs;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 di;
	__u64 runs;
	__u64 anchor[3];
	__u64 monitor[3];
	__u64 blocker;
	__u64 kernel[KERNEL_FRAMES];
};

_Static_assert(sizeof(struct stack_record) == 528, "the stack head is 528 bytes");

/* Where a Java thread's JVM keeps its frame anchor's three words (the
 * addresses of JavaFrameAnchor's _last_Java_sp, _last_Java_fp and
 * _last_Java_pc in its JavaThread), then its two monitor words (the
 * addresses of JavaThread's _current_pending_monitor and
 * _current_waiting_monitor; 0: not read) and where an ObjectMonitor keeps
 * its owner (ObjectMonitor::_owner's offset); then where its
 * java.lang.Thread is (the address of JavaThread::_threadObj, a handle:
 * 0 when not read), the offset of Thread.parkBlocker in it, the
 * compressed oops' base and shift and the offset of an object's class
 * word, by tid: written by user space, which reads the JVM's structures
 * (idleflow-hotspot). */
struct java_anchor {
	__u64 at[11];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u32);
	__type(value, struct java_anchor);
} java_threads SEC(".maps");

/* Per CPU: the chance of a switch to idle to get its stacks, for the
 * current window, and what the window saw. */
struct sampler {
	__u64 window_start;
	__u64 seen;
	__u64 taken;
	/* Take when bpf_get_prandom_u32() is below this (1 << 32: always). */
	__u64 threshold;
};

/* Records that were not written, per CPU. */
struct counters {
	__u64 ring_full;
	__u64 no_ring;
	__u64 context_unknown;
};

/* The inner map's template: user space creates one ring per CPU (its size
 * chosen there) and puts it at the CPU's index of `rings`. */
struct ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1); /* set to the number of possible CPUs */
	__type(key, __u32);
	__array(values, struct ring);
} rings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct sampler);
} samplers SEC(".maps");

/* Records without stacks, held per CPU until a flush (see the top). */
#define BATCH_RECORDS 64
/* A batch whose oldest record is this old is flushed at the CPU's next run. */
#define STALE_NS 4000000ULL

struct batch {
	__u32 n;
	/* Set while a program of this CPU appends or flushes: a program that
	 * interrupted it (flush_cpu, or a waking in the interrupt that
	 * interrupted flush_cpu) leaves the batch alone. */
	__u32 busy;
	__u64 oldest;
	struct record r[BATCH_RECORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct batch);
} batches SEC(".maps");

/* Per CPU (a cache line each): the time of the oldest record in its batch,
 * 0 when it holds none. Written by its CPU's programs only. */
struct pending {
	__u64 oldest;
	__u64 pad[7];
};

_Static_assert(sizeof(struct pending) == 64, "a pending slot is a cache line");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* set to the number of possible CPUs */
	__type(key, __u32);
	__type(value, struct pending);
} pending SEC(".maps");

/* The threads whose stacks were taken at a switch to idle (a byte each,
 * freed with the task): a thread's first switch to idle gets its stacks
 * whatever the sampler says, within the window's cap, so that the idle of
 * a short-lived thread or process has a path of its own, and later
 * switches without stacks can stand for their thread's previous ones. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u8);
} stacked SEC(".maps");

/* Set by user space before the load (then frozen: the verifier folds them). */

/* Where the preempt count sits in the per-CPU area relative to the run
 * queue: &__preempt_count - &runqueues, from the kernel BTF's per-CPU data
 * section. 0: not known, wake-ups are written without their context. */
const volatile __s64 preempt_count_from_rq = 0;

/* Wake the reader when a ring holds this many bytes. */
const volatile __u64 wakeup_bytes = 65536;

/* Read the preempt count with a plain load through an untrusted pointer
 * (bpf_rdonly_cast to void *, Linux 6.17 on); else with
 * bpf_probe_read_kernel, a helper call that costs a waking ~25-50 ns more
 * here. User space loads with 1 and, if the verifier refuses, again with 0. */
const volatile bool untrusted_loads = 1;

/* Stacks at the switches that leave a CPU idle: 0 none, 1 kernel call
 * chains, 2 also user stack copies of idle_user_bytes. */
const volatile __u32 idle_stacks = 0;
const volatile __u32 idle_user_bytes = 0;
/* About this many a second per CPU (0: every one). */
const volatile __u64 idle_stack_budget = 0;
/* Stacks at one waking in waker_one_in (0: none): kernel chains (and an
 * interrupt's), user stack copies of waker_user_bytes at a thread's; at
 * about waker_stack_budget a second per CPU when the wakings come faster
 * (0: no budget). */
const volatile __u32 waker_one_in = 0;
const volatile __u64 waker_stack_budget = 0;
const volatile __u32 waker_kernel = 0;
const volatile __u32 waker_user_bytes = 0;

#define WINDOW_NS 100000000ULL

extern void *bpf_rdonly_cast(const void *obj__ign, __u32 btf_id) __ksym __weak;

static __always_inline struct counters *counters_here(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&counters, &zero);
}

/* `size` bytes in this CPU's ring, or NULL (counted). `*ring` receives the
 * ring, for submit(). (Inlined: `size` is a constant at every call, as the
 * verifier wants.) */
static __always_inline void *reserve_bytes(void **ring, __u64 size)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct counters *c;
	void *r;

	*ring = bpf_map_lookup_elem(&rings, &cpu);
	if (!*ring) {
		c = counters_here();
		if (c)
			__sync_fetch_and_add(&c->no_ring, 1);
		return NULL;
	}
	r = bpf_ringbuf_reserve(*ring, size, 0);
	if (!r) {
		c = counters_here();
		if (c)
			__sync_fetch_and_add(&c->ring_full, 1);
	}
	return r;
}

/* A record in this CPU's ring, or NULL (counted). */
static __always_inline struct record *reserve(void **ring)
{
	return reserve_bytes(ring, sizeof(struct record));
}

/* A record's room in the ring: itself and the ring's 8-byte header. */
#define RECORD_ROOM (sizeof(struct record) + 8)

/* Whether a record of `room` ring bytes that takes the ring's unread bytes
 * to `avail` should wake the reader (see submit). */
static __always_inline __u64 wake_flag(__u64 avail, __u64 room)
{
	if (avail >= wakeup_bytes && avail / wakeup_bytes != (avail - room) / wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* A record with stacks and `user` bytes of user stack: its room. */
static __always_inline __u64 stack_room(__u32 user)
{
	return sizeof(struct stack_record) + user + 8;
}

static __always_inline void submit(void *ring, void *r, __u64 room)
{
	/* Unread bytes, this record's included (it is reserved). */
	__u64 avail = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);

	/* Wake the reader when this record takes the unread bytes past a
	 * multiple of wakeup_bytes, not at every record above it: a reader
	 * that a saturated CPU does not run at once would otherwise be woken
	 * once per record (an interrupt each: irq_work), which slowed a
	 * 128-thread hand-off to a quarter. A wake-up the reader misses is
	 * repeated at the next multiple, and it polls with a timeout anyway. */
	bpf_ringbuf_submit(r, wake_flag(avail, room));
}

/* Writes the records batch `b` (CPU `cpu`'s) holds into `ring` as one ring
 * record and empties it; records the ring has no room for are counted. The
 * caller holds b->busy. */
static __always_inline void flush(struct batch *b, void *ring, __u32 cpu)
{
	struct counters *c;
	struct pending *p;
	__u32 n = b->n;
	__u64 bytes, avail;

	if (n == 0)
		return;
	bytes = (__u64)n * sizeof(struct record);
	/* Bounded where the verifier sees it (clang may not keep a check it
	 * can prove: `n` never exceeds BATCH_RECORDS). */
	asm volatile("" : "+r"(bytes));
	if (bytes > sizeof(b->r))
		bytes = sizeof(b->r);
	n = bytes / sizeof(struct record);
	avail = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) + bytes + 8;
	if (bpf_ringbuf_output(ring, b->r, bytes, wake_flag(avail, bytes + 8))) {
		c = counters_here();
		if (c)
			__sync_fetch_and_add(&c->ring_full, n);
	}
	b->n = 0;
	p = bpf_map_lookup_elem(&pending, &cpu);
	if (p)
		p->oldest = 0;
}

/* Where a record without stacks goes on this CPU: `*slot` in the batch
 * (returns the batch, held busy: finish with done()), or, when the batch
 * is held by the program this one interrupted, a ring record of its own
 * (returns NULL with *slot set: finish with submit()). NULL with *slot
 * NULL: nowhere (counted). */
static __always_inline struct batch *append(void **ring, __u32 *cpu, struct record **slot)
{
	__u32 zero = 0;
	struct batch *b;
	__u32 n;

	*slot = NULL;
	*cpu = bpf_get_smp_processor_id();
	b = bpf_map_lookup_elem(&batches, &zero);
	*ring = bpf_map_lookup_elem(&rings, cpu);
	if (!b || b->busy || !*ring) {
		/* reserve() counts a missing ring. */
		*slot = reserve(ring);
		return NULL;
	}
	b->busy = 1;
	asm volatile("" ::: "memory");
	n = b->n;
	if (n >= BATCH_RECORDS) {
		flush(b, *ring, *cpu);
		n = 0;
	}
	*slot = &b->r[n & (BATCH_RECORDS - 1)];
	return b;
}

/* Ends an append(): the record in its slot is counted in, and the batch
 * flushed if it is full, if `now` (the record's time) is STALE_NS past its
 * oldest, or if `flush_now`. */
static __always_inline void done(struct batch *b, void *ring, __u32 cpu, __u64 now,
				 bool flush_now)
{
	__u32 n = b->n;

	if (n == 0) {
		struct pending *p = bpf_map_lookup_elem(&pending, &cpu);

		b->oldest = now;
		if (p)
			p->oldest = now;
	}
	b->n = n + 1;
	if (flush_now || n + 1 >= BATCH_RECORDS || now - b->oldest >= STALE_NS)
		flush(b, ring, cpu);
	asm volatile("" ::: "memory");
	b->busy = 0;
}

/* Flushes this CPU's batch (before a record with stacks goes into its ring
 * directly, so that the ring stays in the CPU's order; and flush_cpu).
 * Returns 1 when the program this one interrupted holds the batch. */
static __always_inline int flush_here(void)
{
	__u32 zero = 0, cpu = bpf_get_smp_processor_id();
	struct batch *b = bpf_map_lookup_elem(&batches, &zero);
	void *ring;

	if (!b || b->n == 0)
		return 0;
	if (b->busy)
		return 1;
	ring = bpf_map_lookup_elem(&rings, &cpu);
	if (!ring)
		return 0;
	b->busy = 1;
	asm volatile("" ::: "memory");
	flush(b, ring, cpu);
	asm volatile("" ::: "memory");
	b->busy = 0;
	return 0;
}

/* This CPU's preempt count, which says whether the code running is a
 * thread's or an interrupt's (the kernel's own in_nmi(), in_hardirq(),
 * in_serving_softirq(), and what tracepoints put in common_flags). On
 * x86-64 it is the per-CPU variable __preempt_count, which a typed ksym
 * cannot reach on a kernel without CONFIG_KALLSYMS_ALL; so it is found from
 * another per-CPU variable whose address this CPU's current task gives
 * away: its run queue (src/percpu.rs). Returns 0 when *pc was read. */
static __always_inline int read_preempt_count(struct task_struct *cur, __u32 *pc)
{
	struct rq *rq;
	void *at;

	if (!preempt_count_from_rq)
		return -1;
	rq = cur->se.cfs_rq->rq;
	/* The current task always runs on its run queue's CPU; a mismatch
	 * means the walk went wrong, and nothing is guessed. */
	if (!rq || rq->cpu != bpf_get_smp_processor_id())
		return -1;
	at = (void *)rq + preempt_count_from_rq;
	if (untrusted_loads) {
		/* A fault-safe load (the JIT's exception table), no call. */
		*pc = *(__u32 *)bpf_rdonly_cast(at, 0);
		return 0;
	}
	return bpf_probe_read_kernel(pc, sizeof(*pc), at);
}

static __always_inline __u32 task_cpu(struct task_struct *p)
{
	if (bpf_core_field_exists(p->thread_info.cpu))
		return p->thread_info.cpu;
	return p->cpu;
}

/* The samplers (struct sampler), per CPU: one for the switches to idle,
 * one for the wakings. */
enum {
	SAMPLER_IDLE = 0,
	SAMPLER_WAKER = 1,
};

/* Whether this event gets its stacks: each event with the same chance,
 * `base` (out of 1 << 32) while the CPU's events come slower than
 * `budget` a second, less when faster, so that about `budget` a second
 * are taken (0: no budget, `base` alone). The chance for a 100 ms window
 * is set from the rate of the window before; a burst inside a window
 * takes at most twice its share. With `first` (the thread leaving at a
 * switch to idle), its first such switch is taken too, within that cap:
 * its first in each of the states `first_bit` tells apart (a Java
 * thread's monitor enter, monitor wait and other waits: a switch-out
 * without stacks takes those of its thread's last in the same state). */
static __always_inline bool sample(__u32 which, __u64 budget, __u64 base, __u64 now,
				   struct task_struct *first, __u8 first_bit)
{
	struct sampler *s;
	__u64 expect;

	if (!budget)
		return base >= (1ULL << 32) || bpf_get_prandom_u32() < base;
	s = bpf_map_lookup_elem(&samplers, &which);
	if (!s)
		return false;
	expect = budget * WINDOW_NS / 1000000000ULL;
	if (expect == 0)
		expect = 1;
	if (now - s->window_start >= WINDOW_NS) {
		/* The chance for the next window from this one's rate: `seen`
		 * events at chance `base` would take seen * base >> 32. */
		if (s->window_start == 0 || s->seen * base <= (expect << 32))
			s->threshold = base;
		else
			s->threshold = (expect << 32) / s->seen;
		s->window_start = now;
		s->seen = 0;
		s->taken = 0;
	}
	s->seen++;
	if (s->taken >= 2 * expect)
		return false;
	if (bpf_get_prandom_u32() >= s->threshold) {
		/* Not sampled: still taken at a thread's first switch to idle
		 * in this state (`stacked`). */
		__u8 *seen;

		if (!first)
			return false;
		seen = bpf_task_storage_get(&stacked, first, 0, 0);
		if (seen && (*seen & first_bit))
			return false;
	}
	if (first) {
		__u8 *seen = bpf_task_storage_get(&stacked, first, 0,
						  BPF_LOCAL_STORAGE_GET_F_CREATE);

		if (seen)
			*seen |= first_bit;
	}
	s->taken++;
	return true;
}

/* Copies the top of the user stack at sp into r's room of `asked` bytes:
 * all of it, or the largest half, quarter or eighth that is mapped (a
 * shallow stack's top page ends before sp + asked). */
static __always_inline __u32 copy_user_stack(void *dst, __u32 asked, __u64 sp)
{
	if (asked >= 8 && bpf_probe_read_user(dst, asked, (void *)sp) == 0)
		return asked;
	if (asked >= 16 && bpf_probe_read_user(dst, asked / 2, (void *)sp) == 0)
		return asked / 2;
	if (asked >= 32 && bpf_probe_read_user(dst, asked / 4, (void *)sp) == 0)
		return asked / 4;
	if (asked >= 64 && bpf_probe_read_user(dst, asked / 8, (void *)sp) == 0)
		return asked / 8;
	return 0;
}

/* Fills r's stacks of task t (the current task): the kernel chain if
 * `kernel`, the user registers and `user_asked` bytes of its user stack
 * if it has a user space. */
static __always_inline void fill_stacks(void *ctx, struct stack_record *r, struct task_struct *t,
					bool kernel, __u32 user_asked)
{
	struct pt_regs *regs;
	long n;

	r->kernel_bytes = 0;
	r->user_bytes = 0;
	r->user_asked = user_asked;
	r->has_regs = 0;
	struct java_anchor *java;
	__u32 tid;

	r->ip = r->sp = r->bp = r->di = r->runs = 0;
	r->anchor[0] = r->anchor[1] = r->anchor[2] = 0;
	r->monitor[0] = r->monitor[1] = r->monitor[2] = 0;
	r->blocker = 0;
	if (kernel) {
		n = bpf_get_stack(ctx, r->kernel, sizeof(r->kernel), 0);
		if (n > 0)
			r->kernel_bytes = n;
	}
	if (!user_asked || (t->flags & PF_KTHREAD) || !t->mm)
		return;
	regs = (struct pt_regs *)bpf_task_pt_regs(t);
	if (!regs)
		return;
	r->ip = regs->ip;
	r->sp = regs->sp;
	r->bp = regs->bp;
	r->di = regs->di;
	r->has_regs = 1;
	if (bpf_core_field_exists(t->sched_info)) {
		r->runs = BPF_CORE_READ(t, sched_info.pcount);
		r->has_regs |= 2;
	}
	tid = t->pid;
	java = bpf_map_lookup_elem(&java_threads, &tid);
	if (java && bpf_probe_read_user(&r->anchor[0], 8, (void *)java->at[0]) == 0 &&
	    bpf_probe_read_user(&r->anchor[1], 8, (void *)java->at[1]) == 0 &&
	    bpf_probe_read_user(&r->anchor[2], 8, (void *)java->at[2]) == 0)
		r->has_regs |= 4;
	if (java && java->at[3] && bpf_probe_read_user(&r->monitor[0], 8, (void *)java->at[3]) == 0 &&
	    bpf_probe_read_user(&r->monitor[1], 8, (void *)java->at[4]) == 0) {
		/* The owner as the blocked thread found it: who held it up. */
		if (r->monitor[0] &&
		    bpf_probe_read_user(&r->monitor[2], 8, (void *)(r->monitor[0] + java->at[5])) != 0)
			r->monitor[2] = 0;
		r->has_regs |= 8;
	}
	if (java && java->at[6]) {
		/* Thread.parkBlocker's class: the object may move once the
		 * thread runs again, its class does not. */
		__u64 slot = 0, thread = 0;
		__u32 narrow = 0, klass = 0;

		if (bpf_probe_read_user(&slot, 8, (void *)java->at[6]) == 0 && slot &&
		    bpf_probe_read_user(&thread, 8, (void *)slot) == 0 && thread &&
		    bpf_probe_read_user(&narrow, 4, (void *)(thread + java->at[7])) == 0) {
			if (narrow &&
			    bpf_probe_read_user(&klass, 4,
						(void *)(java->at[8] + ((__u64)narrow << (java->at[9] & 31)) +
							 java->at[10])) == 0)
				r->blocker = klass;
			r->has_regs |= 16;
		}
	}
	r->user_bytes = copy_user_stack(r + 1, user_asked, r->sp);
}

/* The FLAG_JAVA bits of a switch to idle of thread tid (the current
 * task): what its monitor words say if it is a Java thread user space
 * told the programs of, else 0. */
static __always_inline __u8 java_state(__u32 tid)
{
	struct java_anchor *java = bpf_map_lookup_elem(&java_threads, &tid);
	__u64 pending = 0, waiting = 0;

	if (!java || !java->at[3] || bpf_probe_read_user(&pending, 8, (void *)java->at[3]) != 0 ||
	    bpf_probe_read_user(&waiting, 8, (void *)java->at[4]) != 0)
		return 0;
	return FLAG_JAVA | (pending ? FLAG_JAVA_PENDING : 0) | (waiting ? FLAG_JAVA_WAITING : 0);
}

/* A record with room for stacks and `user` bytes in this CPU's ring, or
 * NULL (counted). */
static __always_inline struct stack_record *reserve_stacks(void **ring, __u32 user)
{
	return reserve_bytes(ring, sizeof(struct stack_record) + user);
}

/* The switch of prev to the idle task, with prev's stacks. */
static __always_inline int switch_with_stacks(void *ctx, bool preempt, struct task_struct *prev,
					      struct task_struct *next, unsigned int prev_state)
{
	void *ring;
	struct stack_record *r;

	flush_here();
	if (idle_stacks >= 2) {
		r = reserve_stacks(&ring, idle_user_bytes);
		if (!r)
			return 0;
		fill_stacks(ctx, r, prev, true, idle_user_bytes);
	} else {
		r = reserve_stacks(&ring, 0);
		if (!r)
			return 0;
		fill_stacks(ctx, r, prev, true, 0);
	}
	/* Stamped once the stacks are taken (13-50 us here): the CPU goes
	 * idle after this program, not when it started, and the time it
	 * spent is prev's on the CPU, never idle. A waking an interrupt
	 * raised meanwhile is older and still in the batch: the reader puts
	 * it in place (a CPU's ring is in time order but for such records). */
	r->ev.time = bpf_ktime_get_ns();
	r->ev.kind = KIND_SWITCH;
	r->ev.flags = (preempt ? FLAG_PREEMPT : 0) | FLAG_STACKS;
	if (r->has_regs & 8)
		r->ev.flags |= FLAG_JAVA | (r->monitor[0] ? FLAG_JAVA_PENDING : 0) |
			       (r->monitor[1] ? FLAG_JAVA_WAITING : 0);
	r->ev.aux = (__u16)prev->exit_state;
	r->ev.tid_a = prev->pid;
	r->ev.tgid_a = prev->tgid;
	r->ev.tid_b = next->pid;
	r->ev.tgid_b = next->tgid;
	r->ev.arg = prev_state;
	submit(ring, r, stack_room(idle_stacks >= 2 ? idle_user_bytes : 0));
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	void *ring;
	struct record *r;
	struct batch *b;
	__u32 cpu;
	__u64 now = bpf_ktime_get_ns();

	__u8 java = 0;

	if (next->pid == 0 && prev->pid != 0)
		java = java_state(prev->pid);
	if (idle_stacks && next->pid == 0 && prev->pid != 0 &&
	    sample(SAMPLER_IDLE, idle_stack_budget, 1ULL << 32, now, prev,
		   !java			? 1 :
		   java & FLAG_JAVA_PENDING	? 2 :
		   java & FLAG_JAVA_WAITING	? 4 : 8))
		return switch_with_stacks(ctx, preempt, prev, next, prev_state);
	b = append(&ring, &cpu, &r);
	if (!r)
		return 0;
	r->time = now;
	r->kind = KIND_SWITCH;
	r->flags = preempt ? FLAG_PREEMPT : 0;
	r->flags |= java;
	r->aux = (__u16)prev->exit_state;
	r->tid_a = prev->pid;
	r->tgid_a = prev->tgid;
	r->tid_b = next->pid;
	r->tgid_b = next->tgid;
	r->arg = prev_state;
	if (b)
		/* A CPU going idle has time for the flush. */
		done(b, ring, cpu, now, next->pid == 0);
	else
		submit(ring, r, RECORD_ROOM);
	return 0;
}

/* Whether a waking raised with preempt count `pc` (known: `known`) is an
 * interrupt's (src/context.rs decides the same from the same bits). */
static __always_inline bool in_interrupt(bool known, __u32 pc)
{
	return known && (pc & 0x00ff0100);
}

static __always_inline int on_wake(void *ctx, struct task_struct *p, __u8 kind)
{
	struct task_struct *cur;
	void *ring;
	struct record *r;
	struct stack_record *sr = NULL;
	struct batch *b = NULL;
	__u32 pc = 0, cpu = 0;
	bool known;
	__u64 now = bpf_ktime_get_ns();

	cur = bpf_get_current_task_btf();
	known = read_preempt_count(cur, &pc) == 0;
	if (kind == KIND_WAKING && waker_one_in &&
	    sample(SAMPLER_WAKER, waker_stack_budget, (1ULL << 32) / waker_one_in, now, NULL, 0)) {
		flush_here();
		if (waker_user_bytes && !in_interrupt(known, pc)) {
			sr = reserve_stacks(&ring, waker_user_bytes);
			if (!sr)
				return 0;
			fill_stacks(ctx, sr, cur, waker_kernel, waker_user_bytes);
		} else if (waker_kernel) {
			sr = reserve_stacks(&ring, 0);
			if (!sr)
				return 0;
			fill_stacks(ctx, sr, cur, true, 0);
		}
	}
	if (sr) {
		r = &sr->ev;
	} else {
		b = append(&ring, &cpu, &r);
		if (!r)
			return 0;
	}
	r->time = now;
	r->kind = kind;
	if (known) {
		r->flags = FLAG_CONTEXT_KNOWN;
		r->aux = (__u16)(pc >> 8);
	} else {
		struct counters *c = counters_here();

		if (c)
			__sync_fetch_and_add(&c->context_unknown, 1);
		r->flags = 0;
		r->aux = 0;
	}
	r->tid_a = cur->pid;
	r->tgid_a = cur->tgid;
	r->tid_b = p->pid;
	r->tgid_b = p->tgid;
	r->arg = task_cpu(p);
	if (sr) {
		r->flags |= FLAG_STACKS;
		submit(ring, sr, stack_room(waker_user_bytes && !in_interrupt(known, pc) ?
					    waker_user_bytes : 0));
	} else if (b) {
		done(b, ring, cpu, now, false);
	} else {
		submit(ring, r, RECORD_ROOM);
	}
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(on_waking, struct task_struct *p)
{
	return on_wake(ctx, p, KIND_WAKING);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
	return on_wake(ctx, p, KIND_WAKEUP_NEW);
}

/* Flushes the batch of the CPU it runs on, unless a program of that CPU
 * holds it (returns 1; 0 otherwise). User space runs it on a CPU whose
 * batch went stale without a run to flush it (a CPU that runs one thread
 * without switching), through BPF_PROG_TEST_RUN with
 * BPF_F_TEST_RUN_ON_CPU: an interrupt on that CPU. */
SEC("raw_tp")
int flush_cpu(void *ctx)
{
	return flush_here();
}

/* GPL-compatible, as bpf_probe_read_kernel and BTF tracing require; the
 * source's own license (above) is MIT OR Apache-2.0. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
