// Serves control requests of one process on its control socket, on a thread
// of its own: one request line per connection, one reply, then close.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace softverbs::control {

class ControlServer {
 public:
  using Handler = std::function<std::string(std::string_view request)>;

  // Starts listening; returns nullptr (and the reason) if the socket can't be
  // made. The process works without one, it just can't be inspected.
  static std::unique_ptr<ControlServer> start(Handler handler, std::string& error);
  ~ControlServer();

 private:
  ControlServer(int fd, Handler handler);
  void serve();

  int fd_;
  int stop_fd_;  // written once at shutdown
  Handler handler_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace softverbs::control
