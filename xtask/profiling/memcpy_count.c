/*
 * memcpy_count: counts what a process copies with memcpy, by call site.
 *
 * callgrind counts a large copy (`rep movsb`) as a few instructions, so it cannot say how many
 * bytes a call moves; this can. Preload it into the process to measure, reset the counts when
 * the measured phase starts and dump them when it ends:
 *
 *   cc -O2 -shared -fPIC -o /tmp/memcpy_count.so xtask/profiling/memcpy_count.c -ldl
 *   LD_PRELOAD=/tmp/memcpy_count.so target/release/mcp-harness serve ... &
 *   cp /proc/$PID/maps /tmp/maps.$PID      # for symbolize.py
 *   kill -TTIN $PID    # start counting (from zero)
 *   ... the measured calls ...
 *   kill -TTOU $PID    # write /tmp/memcpy_count.$PID
 *   python3 xtask/profiling/symbolize.py $PID CALLS
 *
 * The dump's first line is the totals; every other line is a return address (hex), the
 * bytes copied from it and the number of copies. Counting is off until the first SIGTTIN.
 * A diagnostic, not part of any build or test: session 43 of docs/benchmark-history.md.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef void *(*memcpy_fn)(void *, const void *, size_t);

#define SITES 8192
#define PROBES 16

static memcpy_fn real_memcpy;
static volatile uintptr_t site[SITES];
static volatile uint64_t site_bytes[SITES], site_copies[SITES];
static volatile uint64_t total_bytes, total_copies;
static volatile int counting;

/* Used only before the real memcpy is known (the dynamic linker's own early copies). */
static void *byte_copy(void *to, const void *from, size_t n) {
  char *t = to;
  const char *f = from;
  while (n--) *t++ = *f++;
  return to;
}

static void dump(int signal_number) {
  (void)signal_number;
  char path[64], line[160];
  snprintf(path, sizeof path, "/tmp/memcpy_count.%d", (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  int n = snprintf(line, sizeof line, "total %lu bytes %lu copies\n",
                   (unsigned long)total_bytes, (unsigned long)total_copies);
  (void)!write(fd, line, n);
  for (int i = 0; i < SITES; i++) {
    if (!site[i]) continue;
    n = snprintf(line, sizeof line, "%lx %lu %lu\n", (unsigned long)site[i],
                 (unsigned long)site_bytes[i], (unsigned long)site_copies[i]);
    (void)!write(fd, line, n);
  }
  close(fd);
}

static void reset(int signal_number) {
  (void)signal_number;
  for (int i = 0; i < SITES; i++) site[i] = site_bytes[i] = site_copies[i] = 0;
  total_bytes = total_copies = 0;
  counting = 1;
}

__attribute__((constructor)) static void start(void) {
  real_memcpy = (memcpy_fn)dlsym(RTLD_NEXT, "memcpy");
  signal(SIGTTIN, reset);
  signal(SIGTTOU, dump);
}

void *memcpy(void *to, const void *from, size_t n) {
  if (!real_memcpy) return byte_copy(to, from, n);
  if (counting) {
    uintptr_t at = (uintptr_t)__builtin_return_address(0);
    __atomic_fetch_add(&total_bytes, n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&total_copies, 1, __ATOMIC_RELAXED);
    unsigned slot = (unsigned)((at >> 2) * 2654435761u) % SITES;
    /* Open addressing; a site that finds no slot in PROBES is counted in the totals only. */
    for (int p = 0; p < PROBES; p++, slot = (slot + 1) % SITES) {
      if (site[slot] == at ||
          (site[slot] == 0 && __sync_bool_compare_and_swap(&site[slot], 0, at)) ||
          site[slot] == at) {
        __atomic_fetch_add(&site_bytes[slot], n, __ATOMIC_RELAXED);
        __atomic_fetch_add(&site_copies[slot], 1, __ATOMIC_RELAXED);
        break;
      }
    }
  }
  return real_memcpy(to, from, n);
}
