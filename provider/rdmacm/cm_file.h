// One open rdma_cm device file: the commands librdmacm writes to it (the
// kernel's rdma_user_cm.h ABI) and the events it reads back. The commands
// are served by the process's connection manager (emulator/cm); this file
// only translates. Readiness is an eventfd that counts 1 while events wait,
// so poll(2), select(2), epoll and O_NONBLOCK behave as on the kernel's
// file; a blocking read of an event waits on a condition variable.
//
// Locks: the manager calls on_cm_event() with its lock held, so this file
// never calls the manager while holding its own.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "emulator/cm/connection_manager.h"

namespace softverbs::provider {

// An event as the GET_EVENT command returns it (struct rdma_ucm_event_resp).
struct CmFileEvent {
  uint32_t id = 0;                 // the id handle it is for
  uint32_t listen_id = 0;          // a CONNECT_REQUEST's listener
  bool connect_request = false;
  uint32_t multicast = 0;          // a multicast event's handle
  std::vector<uint8_t> response;   // the response bytes, uid and id filled
};

class CmFile final : public cm::EventSink {
 public:
  CmFile(int eventfd, cm::ConnectionManager& manager);
  CmFile(const CmFile&) = delete;
  CmFile& operator=(const CmFile&) = delete;

  // write(2) of one command: the byte count on success, else -1 with errno.
  ssize_t write_command(const void* buffer, size_t count);

  // Destroys every id still on the file (close(2) of the last reference).
  void close();

  static constexpr int kEventThreadGraceMs = 50;

  void on_cm_event(const cm::Event& event) override;

 private:
  struct Id {
    uint64_t uid = 0;           // librdmacm's cookie, echoed in events
    uint16_t port_space = 0;
    uint8_t qp_type = 0;
    uint32_t events_reported = 0;
    // A connection request's id has no cookie until ACCEPT gives it one;
    // its events until then are dropped, as the kernel does.
    bool has_uid = true;
  };

  int dispatch(uint32_t command, const uint8_t* in, size_t in_length, size_t out_length);
  int create_id(const uint8_t* in, size_t in_length);
  int destroy_id(const uint8_t* in, size_t in_length);
  int get_event(const uint8_t* in, size_t in_length);
  int migrate_id(const uint8_t* in, size_t in_length);
  // Addresses and routes (cm_file_addresses.cc).
  int bind_ip(const uint8_t* in, size_t in_length);
  int bind(const uint8_t* in, size_t in_length);
  int resolve_ip(const uint8_t* in, size_t in_length);
  int resolve_addr(const uint8_t* in, size_t in_length);
  int resolve_route(const uint8_t* in, size_t in_length);
  int query_route(const uint8_t* in, size_t in_length);
  int query(const uint8_t* in, size_t in_length, size_t out_length);
  // Connections (cm_file_connections.cc).
  int connect(const uint8_t* in, size_t in_length);
  int listen(const uint8_t* in, size_t in_length);
  int accept(const uint8_t* in, size_t in_length);
  int reject(const uint8_t* in, size_t in_length);
  int disconnect(const uint8_t* in, size_t in_length);
  int notify(const uint8_t* in, size_t in_length);
  int init_qp_attr(const uint8_t* in, size_t in_length);
  int set_option(const uint8_t* in, size_t in_length);
  // Multicast (cm_file_multicast.cc).
  int join_ip_mcast(const uint8_t* in, size_t in_length);
  int join_mcast(const uint8_t* in, size_t in_length);
  int join(uint32_t id, const sockaddr* group, size_t group_length, uint64_t uid,
           uint64_t response);
  int leave_mcast(const uint8_t* in, size_t in_length);

  bool has_id(uint32_t id);
  // Queues an event and makes the file readable.
  void post_event(CmFileEvent event);
  void wait_for_event_thread(std::unique_lock<std::mutex>& lock);
  // Makes the fd readable exactly while events wait; after every change.
  void update_readiness();
  // Takes the ids of `listen_id`'s unread connection requests off the file.
  std::vector<uint32_t> drop_pending_requests(uint32_t listen_id);

  cm::ConnectionManager* const manager_;
  const int eventfd_;
  std::mutex mutex_;
  std::map<uint32_t, Id> ids_;
  std::deque<CmFileEvent> events_;
  bool readable_ = false;
  bool closed_ = false;
  std::condition_variable arrived_;
  // The thread that last waited for an event here, and whether it waits
  // now: close() gives it a moment to be back (see there).
  pid_t reader_tid_ = 0;
  bool reader_waiting_ = false;
  std::condition_variable reader_back_;
  // Multicast groups joined, by handle (librdmacm's "mc id").
  struct Multicast {
    uint32_t id = 0;  // the id that joined
    uint64_t uid = 0;
    uint32_t events_reported = 0;
  };
  std::map<uint32_t, Multicast> multicasts_;
  // Apart from id handles, so an event names one or the other.
  uint32_t next_multicast_ = 0x80000000;
};

}  // namespace softverbs::provider
