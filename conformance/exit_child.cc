// A program that exits while its threads are still in verbs calls, for
// exit_with_waiting_threads_test.cc, which starts it as a process of its
// own (a fork of the test process would carry that process's threads'
// state, which sanitizers then report at the child's exit).
//
//   conformance_exit_child --device NAME --gid-index N CASE
//
// CASE: main (exit() from main while threads wait in ibv_get_cq_event,
// ibv_get_async_event and poll() on their fds), other-thread (exit() from
// another thread while main waits too), worker (exit() from main while a
// thread posts and polls on a loopback pair). Exits with status 42; any
// other status says where it went wrong.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "harness/testsupport/device.h"
#include "harness/testsupport/rc_connection.h"
#include "harness/testsupport/test_config.h"
#include "harness/testsupport/verbs_handles.h"

// Objects stay in use at exit on purpose: what is still allocated then is
// no leak, and LeakSanitizer (in a sanitizer build) is not asked.
extern "C" int __lsan_is_turned_off() { return 1; }

namespace {

using namespace softverbs::testsupport;

constexpr int kExitStatus = 42;

enum class Exiter { kMainThread, kOtherThread, kWhileAThreadPostsAndPolls };

// Threads that wait for ever: no event will come.
void wait_in_cq_event(ibv_comp_channel* channel) {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  if (ibv_get_cq_event(channel, &cq, &context) == 0) _exit(3);  // no completion will come
}

void wait_in_async_event(ibv_context* context) {
  ibv_async_event event{};
  if (ibv_get_async_event(context, &event) == 0) _exit(4);
}

void wait_in_poll(int first, int second) {
  pollfd fds[2] = {{first, POLLIN, 0}, {second, POLLIN, 0}};
  if (poll(fds, 2, -1) > 0) _exit(5);
}

// Two RC QPs of one device connected to each other, in RTS.
bool connect_loopback_pair(ibv_context* context, ibv_pd* pd, ibv_cq* cq, ibv_qp*& a,
                           ibv_qp*& b) {
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {16, 16, 1, 1, 0};
  a = ibv_create_qp(pd, &init);
  b = ibv_create_qp(pd, &init);
  PortAddress port;
  return a && b && query_port_address(context, 1, test_config().gid_index, port) == 0 &&
         connect_rc_pair(a, b, port) == 0;
}

// SENDs from a to b for ever, each received and both completions polled,
// as a program's worker thread does while another thread exits.
void ping_for_ever(ibv_pd* pd, ibv_cq* cq, ibv_qp* a, ibv_qp* b) {
  static char bytes[2][64];
  ibv_mr* mr = ibv_reg_mr(pd, bytes, sizeof bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) _exit(15);
  for (;;) {
    ibv_sge in{reinterpret_cast<uintptr_t>(bytes[1]), 64, mr->lkey};
    ibv_recv_wr recv{};
    recv.sg_list = &in;
    recv.num_sge = 1;
    ibv_recv_wr* bad_recv = nullptr;
    ibv_sge out{reinterpret_cast<uintptr_t>(bytes[0]), 64, mr->lkey};
    ibv_send_wr send{};
    send.sg_list = &out;
    send.num_sge = 1;
    send.opcode = IBV_WR_SEND;
    send.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad_send = nullptr;
    if (ibv_post_recv(b, &recv, &bad_recv) || ibv_post_send(a, &send, &bad_send)) _exit(16);
    ibv_wc wc[2];
    for (int got = 0; got < 2;) {
      const int n = ibv_poll_cq(cq, 2 - got, wc);
      if (n < 0) _exit(17);
      for (int i = 0; i < n; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) _exit(18);
      got += n;
    }
  }
}

// The child: a device, an armed CQ on a completion channel, a QP, and a
// thread waiting in each way; then exit(kExitStatus) from `exiter`.
[[noreturn]] void child(Exiter exiter) {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  if (!context) _exit(10);
  ibv_comp_channel* channel = ibv_create_comp_channel(context.get());
  if (!channel) _exit(11);
  ibv_cq* cq = ibv_create_cq(context.get(), 16, nullptr, channel, 0);
  if (!cq || ibv_req_notify_cq(cq, 0)) _exit(12);
  ibv_pd* pd = ibv_alloc_pd(context.get());
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {4, 4, 1, 1, 0};
  if (!pd || !ibv_create_qp(pd, &init)) _exit(13);
  if (exiter == Exiter::kWhileAThreadPostsAndPolls) {
    ibv_qp* a = nullptr;
    ibv_qp* b = nullptr;
    ibv_cq* busy_cq = ibv_create_cq(context.get(), 64, nullptr, nullptr, 0);
    if (!busy_cq || !connect_loopback_pair(context.get(), pd, busy_cq, a, b)) _exit(14);
    std::thread(ping_for_ever, pd, busy_cq, a, b).detach();
  }
  ibv_context* raw = context.release();  // left for the exit, as a program leaves it
  std::thread(wait_in_cq_event, channel).detach();
  std::thread(wait_in_async_event, raw).detach();
  std::thread(wait_in_poll, channel->fd, raw->async_fd).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all of them waiting
  if (exiter == Exiter::kOtherThread) {
    std::thread([] { std::exit(kExitStatus); }).detach();
    wait_in_cq_event(channel);  // the main thread waits too
    _exit(6);
  }
  std::exit(kExitStatus);
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  if (configure_from_command_line(argc, argv, error) != 0 || argc != 2) {
    std::fprintf(stderr, "conformance_exit_child: %s\nusage: conformance_exit_child "
                 "[--device NAME] [--gid-index N] main|other-thread|worker\n", error.c_str());
    return 2;
  }
  const std::string_view which = argv[1];
  if (which == "main") child(Exiter::kMainThread);
  if (which == "other-thread") child(Exiter::kOtherThread);
  if (which == "worker") child(Exiter::kWhileAThreadPostsAndPolls);
  std::fprintf(stderr, "conformance_exit_child: no case named '%s'\n", argv[1]);
  return 2;
}
