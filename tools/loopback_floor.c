// The kernel's share of streaming one token per event on this machine, with nothing else: C
// connections on 127.0.0.1, S steps; each step a writer thread sends one W-byte event to every
// connection (one send() each, TCP_NODELAY, as the HTTP server does) and sleeps 40 ms (an
// engine step); a reader thread epoll_wait()s and recv()s them all. Prints each thread's CPU
// seconds: what the SSE events of `troupe serve` cost at least, before any JSON, CAF message or
// HTTP framing (docs/benchmarks.md "Serving", the CPU part). Defaults: 300 x 128 events of 260
// bytes, the shape of `tools/bench_serving_ab.sh`. Optional arguments: connections, steps, the
// step's sleep in ms and a delay in ms before the first step (to lay the events over the
// decode phase of a `troupe bench throughput` run beside it: FLOOR in tools/bench_serving_ab.sh).
//
//   gcc -O2 -pthread -o /tmp/loopback_floor tools/loopback_floor.c && /tmp/loopback_floor
//   /tmp/loopback_floor [C [S [STEP_MS [DELAY_MS]]]]
#define _GNU_SOURCE  // RUSAGE_THREAD
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MAX_C = 4096, W = 260 };
static int C = 300, S = 128, step_ms = 40, delay_ms = 0;
static int server_side[MAX_C], client_side[MAX_C];

static double thread_cpu_s(void) {
  struct rusage r;
  getrusage(RUSAGE_THREAD, &r);
  return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         1e-6 * (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

static void die(const char* what) {
  perror(what);
  exit(1);
}

static void* writer(void* arg) {
  (void)arg;
  char event[W];
  memset(event, 'x', sizeof event);
  const struct timespec step = {step_ms / 1000, (long)(step_ms % 1000) * 1000000L};
  const struct timespec delay = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
  nanosleep(&delay, NULL);
  for (int s = 0; s < S; ++s) {
    for (int c = 0; c < C; ++c)
      if (send(server_side[c], event, W, 0) != W) die("send");
    nanosleep(&step, NULL);
  }
  printf("writer: %.3f s CPU for %d send()s (%.1f us each)\n", thread_cpu_s(), C * S,
         1e6 * thread_cpu_s() / (C * S));
  return NULL;
}

int main(int argc, char** argv) {
  int* const params[] = {&C, &S, &step_ms, &delay_ms};
  for (int i = 1; i < argc && i <= 4; ++i) *params[i - 1] = atoi(argv[i]);
  if (C < 1 || C > MAX_C || S < 1 || step_ms < 0 || delay_ms < 0) {
    fprintf(stderr, "usage: %s [connections 1..%d [steps >= 1 [step_ms >= 0 [delay_ms >= 0]]]]\n",
            argv[0], MAX_C);
    return 2;
  }
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || bind(listener, (struct sockaddr*)&addr, sizeof addr) != 0 ||
      listen(listener, C) != 0 || getsockname(listener, (struct sockaddr*)&addr, &len) != 0)
    die("listen on 127.0.0.1");
  const int one = 1;
  const int ep = epoll_create1(0);
  for (int c = 0; c < C; ++c) {
    client_side[c] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client_side[c], (struct sockaddr*)&addr, sizeof addr) != 0) die("connect");
    server_side[c] = accept(listener, NULL, NULL);
    if (server_side[c] < 0) die("accept");
    setsockopt(server_side[c], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, client_side[c], &e) != 0) die("epoll_ctl");
  }
  const double start = thread_cpu_s();
  pthread_t t;
  pthread_create(&t, NULL, writer, NULL);
  long got = 0, recvs = 0, waits = 0;
  char buf[65536];
  const long want = (long)C * S * W;
  // Bounded: every wait times out after 1 s, and 60 of them in a row end the run.
  for (int idle = 0; got < want && idle < 60;) {
    struct epoll_event ev[512];
    const int n = epoll_wait(ep, ev, 512, 1000);
    ++waits;
    idle = n == 0 ? idle + 1 : 0;
    for (int i = 0; i < n; ++i) {
      const ssize_t r = recv(client_side[ev[i].data.u32], buf, sizeof buf, 0);
      ++recvs;
      if (r > 0) got += r;
    }
  }
  pthread_join(t, NULL);
  const double reader = thread_cpu_s() - start;
  printf("reader: %.3f s CPU for %ld recv()s and %ld epoll_wait()s (%.1f us an event)\n", reader,
         recvs, waits, 1e6 * reader / (C * S));
  return got == want ? 0 : 1;
}
