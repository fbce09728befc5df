#include "bench/rc_session.h"

#include "bench/peer_process.h"

namespace softverbs::bench {
namespace {

constexpr auto kReplyTimeout = std::chrono::duration_cast<std::chrono::milliseconds>(kHangLimit);

}  // namespace

std::unique_ptr<RcSession> RcSession::start(PeerTask task, uint32_t message_bytes,
                                            uint64_t iterations, std::string& error) {
  PeerProcess* peer = PeerProcess::get();
  if (!peer) {
    error = PeerProcess::gone_reason();
    return nullptr;
  }
  std::unique_ptr<RcSession> session(new RcSession);
  session->task_ = task;
  session->endpoint_ = RcEndpoint::open(benchmark_device_name(), message_bytes, error);
  if (!session->endpoint_) return nullptr;

  Channel& channel = peer->channel();
  PeerReply opened;
  if (!channel.send(PeerRequest{task, message_bytes, iterations}) ||
      !channel.receive(opened, kReplyTimeout)) {
    error = "the peer process did not answer";
    PeerProcess::abandon(error);
    return nullptr;
  }
  if (!opened.ok) {
    error = opened.message;
    return nullptr;
  }
  if (!session->endpoint_->connect(opened.address, error)) {
    // The peer now waits for an address; there is no honest one to give.
    PeerProcess::abandon(error);
    return nullptr;
  }
  PeerReply ready;
  if (!channel.send(session->endpoint_->address()) || !channel.receive(ready, kReplyTimeout)) {
    error = "the peer process did not answer";
    PeerProcess::abandon(error);
    return nullptr;
  }
  if (!ready.ok) {
    error = ready.message;
    return nullptr;
  }
  return session;
}

bool RcSession::finish(std::string& error) {
  PeerProcess* peer = PeerProcess::get();
  if (!peer) {
    error = PeerProcess::gone_reason();
    return false;
  }
  if (task_ == PeerTask::kWriteSink && !peer->channel().send(PeerRequest{PeerTask::kFinish, 0, 0})) {
    error = "the peer process is gone";
    PeerProcess::abandon(error);
    return false;
  }
  PeerReply outcome;
  if (!peer->channel().receive(outcome, kReplyTimeout)) {
    error = "the peer process did not report its outcome";
    PeerProcess::abandon(error);
    return false;
  }
  if (!outcome.ok) {
    error = outcome.message;
    return false;
  }
  return true;
}

void RcSession::abandon(const std::string& why) { PeerProcess::abandon(why); }

}  // namespace softverbs::bench
