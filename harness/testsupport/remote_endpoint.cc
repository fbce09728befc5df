#include "harness/testsupport/remote_endpoint.h"

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <type_traits>

#include "harness/testsupport/soft_control.h"

namespace softverbs::testsupport {

enum class RemoteCommand : uint32_t {
  kOpen = 1,
  kConnect,
  kPostSend,
  kPostRecv,
  kPoll,
  kState,
  kMoveTo,
  kWaitAsyncEvent,
  kFill,
  kFillConstant,
  kCheck,
  kCheckConstant,
  kReadWord,
  kWriteWord,
  kAddToWord,
  kControl,
  kUnmapBuffer,
  kKill,
};

// One request: the command and whichever arguments it uses. Plain data.
struct RemoteRequest {
  RemoteCommand command{};
  EndpointConfig config{};
  EndpointInfo remote{};
  RcParameters params{};
  SendSpec send{};
  RecvSpec recv{};
  Queue queue = Queue::kSend;
  ibv_qp_state state = IBV_QPS_RTS;
  ibv_event_type event_type = IBV_EVENT_DEVICE_FATAL;
  uint32_t flag = 0;  // kMoveTo: SQD notify
  uint64_t count = 0;
  int64_t timeout_ms = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t value = 0;  // seed, constant byte or word
};
static_assert(std::is_trivially_copyable_v<RemoteRequest>);

// Events beyond this many in one reply are not reported.
constexpr size_t kMaxReportedEvents = 16;

struct RemoteReply {
  Errno err = 0;
  EndpointInfo info{};
  ibv_qp_state state = IBV_QPS_UNKNOWN;
  uint64_t value = 0;
  uint32_t has_mismatch = 0;
  ByteMismatch mismatch{};
  uint32_t found_event = 0;  // events[0] is the one waited for
  uint32_t event_count = 0;
  AsyncEventRecord events[kMaxReportedEvents]{};
  uint32_t text_follows = 0;
};
static_assert(std::is_trivially_copyable_v<RemoteReply>);

namespace {

std::string as_bytes(const std::vector<ibv_wc>& completions) {
  return std::string(reinterpret_cast<const char*>(completions.data()),
                     completions.size() * sizeof(ibv_wc));
}

void from_bytes(const std::string& bytes, std::vector<ibv_wc>& out) {
  const size_t count = bytes.size() / sizeof(ibv_wc);
  if (count == 0) return;  // out.data() may be null: memcpy forbids that
  const size_t first = out.size();
  out.resize(first + count);
  std::memcpy(out.data() + first, bytes.data(), count * sizeof(ibv_wc));
}

// Executes one request on `endpoint`; fills `reply` (and `text` for
// commands that answer with text).
void execute(Endpoint& endpoint, const RemoteRequest& request, const std::string& request_text,
             RemoteReply& reply, std::string& text) {
  const std::chrono::milliseconds timeout(request.timeout_ms);
  switch (request.command) {
    case RemoteCommand::kOpen:
      reply.err = endpoint.open(request.config);
      if (!reply.err) reply.info = endpoint.info();
      return;
    case RemoteCommand::kConnect:
      reply.err = endpoint.connect(request.remote, request.params, request.state);
      return;
    case RemoteCommand::kPostSend: reply.err = endpoint.post_send(request.send); return;
    case RemoteCommand::kPostRecv: reply.err = endpoint.post_recv(request.recv); return;
    case RemoteCommand::kPoll: {
      std::vector<ibv_wc> completions;
      reply.err = endpoint.poll(request.queue, request.count, completions, timeout);
      text = as_bytes(completions);
      reply.text_follows = 1;
      return;
    }
    case RemoteCommand::kState: reply.state = endpoint.state(); return;
    case RemoteCommand::kMoveTo:
      reply.err = endpoint.move_to(request.state, request.flag != 0);
      return;
    case RemoteCommand::kWaitAsyncEvent: {
      std::vector<AsyncEventRecord> others;
      const std::optional<AsyncEventRecord> found =
          endpoint.wait_for_async_event(request.event_type, timeout, &others);
      if (found) reply.events[reply.event_count++] = *found;
      reply.found_event = found ? 1 : 0;
      for (const AsyncEventRecord& event : others) {
        if (reply.event_count == kMaxReportedEvents) break;
        reply.events[reply.event_count++] = event;
      }
      return;
    }
    case RemoteCommand::kFill:
      endpoint.fill(request.offset, request.length, request.value);
      return;
    case RemoteCommand::kFillConstant:
      endpoint.fill_constant(request.offset, request.length,
                             static_cast<uint8_t>(request.value));
      return;
    case RemoteCommand::kCheck:
    case RemoteCommand::kCheckConstant: {
      const auto mismatch =
          request.command == RemoteCommand::kCheck
              ? endpoint.check(request.offset, request.length, request.value)
              : endpoint.check_constant(request.offset, request.length,
                                        static_cast<uint8_t>(request.value));
      reply.has_mismatch = mismatch ? 1 : 0;
      if (mismatch) reply.mismatch = *mismatch;
      return;
    }
    case RemoteCommand::kReadWord: reply.value = endpoint.read_word(request.offset); return;
    case RemoteCommand::kWriteWord: endpoint.write_word(request.offset, request.value); return;
    case RemoteCommand::kAddToWord: endpoint.add_to_word(request.offset, request.count); return;
    case RemoteCommand::kControl:
      reply.err = soft_control(request_text, text);
      reply.text_follows = 1;
      return;
    case RemoteCommand::kUnmapBuffer: endpoint.unmap_buffer(); return;
  }
  reply.err = EPROTO;
}

// Keeps `offset + length` inside the buffer a request names, so a wrong
// request fails instead of touching memory outside it.
bool within_buffer(const Endpoint& endpoint, const RemoteRequest& request) {
  switch (request.command) {
    case RemoteCommand::kFill:
    case RemoteCommand::kFillConstant:
    case RemoteCommand::kCheck:
    case RemoteCommand::kCheckConstant:
      return request.offset <= endpoint.buffer().size() &&
             request.length <= endpoint.buffer().size() - request.offset;
    case RemoteCommand::kReadWord:
    case RemoteCommand::kWriteWord:
    case RemoteCommand::kAddToWord:
      return request.offset % 8 == 0 && request.offset + 8 <= endpoint.buffer().size();
    default:
      return true;
  }
}

}  // namespace

PeerOutcome serve_endpoint(PeerChannel& channel) {
  Endpoint endpoint;
  for (;;) {
    RemoteRequest request;
    Errno err = channel.receive(request);
    if (err == EPIPE) return PeerOutcome::pass();  // the test is done with us
    if (err) return PeerOutcome::fail("endpoint request: " + channel.explain(err));
    std::string request_text;
    if (request.command == RemoteCommand::kControl) {
      if (Errno e = channel.receive_text(request_text))
        return PeerOutcome::fail("control request text: " + channel.explain(e));
    }
    // Dies as a killed process does: no reply, no cleanup.
    if (request.command == RemoteCommand::kKill) raise(SIGKILL);
    RemoteReply reply;
    std::string text;
    if (request.command != RemoteCommand::kOpen && !endpoint.qp() &&
        request.command != RemoteCommand::kControl) {
      reply.err = ENOTCONN;  // nothing opened yet
    } else if (!within_buffer(endpoint, request)) {
      reply.err = ERANGE;
    } else {
      execute(endpoint, request, request_text, reply, text);
    }
    if (Errno e = channel.send(reply)) return PeerOutcome::fail("reply: " + channel.explain(e));
    if (reply.text_follows) {
      if (Errno e = channel.send_text(text))
        return PeerOutcome::fail("reply text: " + channel.explain(e));
    }
  }
}

Errno RemoteEndpoint::call(const RemoteRequest& request, RemoteReply& reply,
                           const std::string* text, std::string* reply_text) {
  auto failed = [this](const char* what, Errno err) {
    why_ = std::string(what) + ": " + channel_.explain(err);
    return err;
  };
  if (Errno err = channel_.send(request)) return failed("sending the request", err);
  if (text) {
    if (Errno err = channel_.send_text(*text)) return failed("sending the request text", err);
  }
  if (Errno err = channel_.receive(reply)) return failed("receiving the reply", err);
  if (reply.text_follows) {
    std::string ignored;
    if (Errno err = channel_.receive_text(reply_text ? *reply_text : ignored))
      return failed("receiving the reply text", err);
  }
  why_ = reply.err ? "the peer's verb returned " + describe_errno(reply.err) : std::string();
  return reply.err;
}

Errno RemoteEndpoint::open(const EndpointConfig& config, EndpointInfo& info) {
  RemoteRequest request;
  request.command = RemoteCommand::kOpen;
  request.config = config;
  RemoteReply reply;
  Errno err = call(request, reply);
  if (!err) info = reply.info;
  return err;
}

Errno RemoteEndpoint::connect(const EndpointInfo& remote, const RcParameters& params,
                              ibv_qp_state final_state) {
  RemoteRequest request;
  request.command = RemoteCommand::kConnect;
  request.remote = remote;
  request.params = params;
  request.state = final_state;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::post_send(const SendSpec& spec) {
  RemoteRequest request;
  request.command = RemoteCommand::kPostSend;
  request.send = spec;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::post_recv(const RecvSpec& spec) {
  RemoteRequest request;
  request.command = RemoteCommand::kPostRecv;
  request.recv = spec;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::poll(Queue queue, size_t count, std::vector<ibv_wc>& out,
                           std::chrono::milliseconds timeout) {
  RemoteRequest request;
  request.command = RemoteCommand::kPoll;
  request.queue = queue;
  request.count = count;
  request.timeout_ms = timeout.count();
  RemoteReply reply;
  std::string bytes;
  Errno err = call(request, reply, nullptr, &bytes);
  from_bytes(bytes, out);
  return err;
}

ibv_qp_state RemoteEndpoint::state() {
  RemoteRequest request;
  request.command = RemoteCommand::kState;
  RemoteReply reply;
  return call(request, reply) ? IBV_QPS_UNKNOWN : reply.state;
}

Errno RemoteEndpoint::move_to(ibv_qp_state state, bool sqd_notify) {
  RemoteRequest request;
  request.command = RemoteCommand::kMoveTo;
  request.state = state;
  request.flag = sqd_notify ? 1 : 0;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::wait_for_async_event(ibv_event_type type,
                                           std::chrono::milliseconds timeout,
                                           std::optional<AsyncEventRecord>& found,
                                           std::vector<AsyncEventRecord>* others) {
  RemoteRequest request;
  request.command = RemoteCommand::kWaitAsyncEvent;
  request.event_type = type;
  request.timeout_ms = timeout.count();
  RemoteReply reply;
  found.reset();
  if (Errno err = call(request, reply)) return err;
  uint32_t first_other = 0;
  if (reply.found_event) {
    found = reply.events[0];
    first_other = 1;
  }
  if (others) {
    for (uint32_t i = first_other; i < reply.event_count; ++i) others->push_back(reply.events[i]);
  }
  return 0;
}

Errno RemoteEndpoint::fill(uint64_t offset, uint64_t length, uint64_t seed) {
  RemoteRequest request;
  request.command = RemoteCommand::kFill;
  request.offset = offset;
  request.length = length;
  request.value = seed;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::fill_constant(uint64_t offset, uint64_t length, uint8_t value) {
  RemoteRequest request;
  request.command = RemoteCommand::kFillConstant;
  request.offset = offset;
  request.length = length;
  request.value = value;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::check(uint64_t offset, uint64_t length, uint64_t seed,
                            std::optional<ByteMismatch>& mismatch) {
  RemoteRequest request;
  request.command = RemoteCommand::kCheck;
  request.offset = offset;
  request.length = length;
  request.value = seed;
  RemoteReply reply;
  mismatch.reset();
  Errno err = call(request, reply);
  if (!err && reply.has_mismatch) mismatch = reply.mismatch;
  return err;
}

Errno RemoteEndpoint::check_constant(uint64_t offset, uint64_t length, uint8_t value,
                                     std::optional<ByteMismatch>& mismatch) {
  RemoteRequest request;
  request.command = RemoteCommand::kCheckConstant;
  request.offset = offset;
  request.length = length;
  request.value = value;
  RemoteReply reply;
  mismatch.reset();
  Errno err = call(request, reply);
  if (!err && reply.has_mismatch) mismatch = reply.mismatch;
  return err;
}

Errno RemoteEndpoint::read_word(uint64_t offset, uint64_t& value) {
  RemoteRequest request;
  request.command = RemoteCommand::kReadWord;
  request.offset = offset;
  RemoteReply reply;
  Errno err = call(request, reply);
  if (!err) value = reply.value;
  return err;
}

Errno RemoteEndpoint::write_word(uint64_t offset, uint64_t value) {
  RemoteRequest request;
  request.command = RemoteCommand::kWriteWord;
  request.offset = offset;
  request.value = value;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::add_to_word(uint64_t offset, uint64_t count) {
  RemoteRequest request;
  request.command = RemoteCommand::kAddToWord;
  request.offset = offset;
  request.count = count;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::unmap_buffer() {
  RemoteRequest request;
  request.command = RemoteCommand::kUnmapBuffer;
  RemoteReply reply;
  return call(request, reply);
}

Errno RemoteEndpoint::kill() {
  RemoteRequest request;
  request.command = RemoteCommand::kKill;
  if (Errno err = channel_.send(request)) {
    why_ = "sending the request: " + channel_.explain(err);
    return err;
  }
  // Its end of the channel closes when it is gone.
  RemoteReply reply;
  const Errno err = channel_.receive(reply);
  if (err == EPIPE || err == ECONNRESET) return 0;
  why_ = "the peer did not die: " + (err ? channel_.explain(err) : std::string("it replied"));
  return err ? err : EPROTO;
}

Errno RemoteEndpoint::control(std::string_view text, std::string& reply_text) {
  RemoteRequest request;
  request.command = RemoteCommand::kControl;
  const std::string request_text(text);
  RemoteReply reply;
  return call(request, reply, &request_text, &reply_text);
}

}  // namespace softverbs::testsupport
