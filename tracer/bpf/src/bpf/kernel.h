/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The kernel types and constants sched.bpf.c reads, and nothing else: the
 * few lines of a vmlinux.h it needs. Each struct lists only the fields the
 * programs read and is marked preserve_access_index, so libbpf relocates
 * every access by field name against the running kernel's BTF
 * (/sys/kernel/btf/vmlinux) at load time (CO-RE): the offsets below are
 * never used, and a field the running kernel lacks fails the load with a
 * message naming it (or is skipped where the program asks
 * bpf_core_field_exists first).
 */
#ifndef IDLEFLOW_KERNEL_H
#define IDLEFLOW_KERNEL_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* include/uapi/linux/bpf.h: stable ABI numbers. */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};
enum {
	BPF_F_NO_PREALLOC = 1,
	BPF_F_MMAPABLE = 1024,
};
enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};
enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};
enum {
	BPF_RB_AVAIL_DATA = 0,
};

/* include/linux/sched.h: the task is a kernel thread (no user space). */
#define PF_KTHREAD 0x00200000

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

/* x86-64 and most others (CONFIG_THREAD_INFO_IN_TASK): task_cpu() is
 * thread_info.cpu. */
struct thread_info {
	__u32 cpu;
};

struct rq {
	int cpu;
};

struct cfs_rq {
	struct rq *rq;
};

struct sched_entity {
	/* The CFS run queue the task is (or would be) queued on: its CPU's,
	 * also for tasks of other classes and for the idle task. */
	struct cfs_rq *cfs_rq;
};

/* The user registers saved at the kernel's entry (x86-64 names). */
struct pt_regs {
	unsigned long di;
	unsigned long bp;
	unsigned long ip;
	unsigned long sp;
};

struct mm_struct {
	unsigned long task_size;
};

/* CONFIG_SCHED_INFO: how many times the task came onto a CPU. */
struct sched_info {
	unsigned long pcount;
};

struct task_struct {
	struct thread_info thread_info;
	unsigned int flags;
	struct mm_struct *mm;
	/* Kernels without CONFIG_THREAD_INFO_IN_TASK (and before 5.16 on some
	 * architectures) keep the CPU here. */
	unsigned int cpu;
	struct sched_entity se;
	int exit_state;
	int pid;
	int tgid;
	struct sched_info sched_info;
};

#pragma clang attribute pop

#endif
