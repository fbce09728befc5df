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

#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "emulator/cm/connection_manager.h"

namespace softverbs::provider {

// An event as the GET_EVENT command returns it (struct rdma_ucm_event_resp).
struct CmFileEvent {
  uint32_t id = 0;                 // the id handle it is for
  uint32_t listen_id = 0;          // a CONNECT_REQUEST's listener
  bool connect_request = false;
  uint32_t multicast = 0;          // a multicast event's handle
  bool from_kernel = false;        // the kernel's CM reported it (forwarded id)
  std::vector<uint8_t> response;   // the response bytes, uid and id filled
};

class KernelRdmaCm;

class CmFile final : public cm::EventSink {
 public:
  CmFile(int eventfd, cm::ConnectionManager& manager);
  ~CmFile() override;
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
    // Served by the kernel's CM (a real device's address): `kernel_id` is
    // its handle on the kernel's file, and every command goes there.
    bool forwarded = false;
    uint32_t kernel_id = 0;
    // A soft id bound to the any address holds its port on the kernel's
    // file too, and listens there when it listens (a listener hears every
    // device), through this kernel id. (The kernel's handles start at 0.)
    std::optional<uint32_t> shadow_kernel_id;
    // SET_OPTIONs taken while soft, replayed when the id moves to the kernel.
    struct Option {
      uint32_t level = 0;
      uint32_t name = 0;
      std::vector<uint8_t> value;
    };
    std::vector<Option> options;
  };

  int dispatch(uint32_t command, const uint8_t* in, size_t in_length, size_t out_length);
  int create_id(const uint8_t* in, size_t in_length);
  int destroy_id(const uint8_t* in, size_t in_length);
  int get_event(const uint8_t* in, size_t in_length);
  int migrate_id(const uint8_t* in, size_t in_length);
  // Addresses and routes (cm_file_addresses.cc).
  int bind_ip(const uint8_t* in, size_t in_length);
  int bind(const uint8_t* in, size_t in_length);
  int bind_soft(uint32_t id, const cm::IpEndpoint& address);
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
  int set_soft_option(const rdma_ucm_set_option& command);
  // Multicast (cm_file_multicast.cc).
  int join_ip_mcast(const uint8_t* in, size_t in_length);
  int join_mcast(const uint8_t* in, size_t in_length);
  int join(uint32_t id, const sockaddr* group, size_t group_length, uint64_t uid,
           uint64_t response);
  int leave_mcast(const uint8_t* in, size_t in_length);

  // Forwarding to the kernel's CM (cm_file_forwarding.cc). `handled`:
  // the command was the kernel's, and the result is its.
  int forward_if_kernel(uint32_t command, const uint8_t* in, size_t in_length,
                        size_t out_length, bool& handled);
  bool forwarding_possible();
  KernelRdmaCm* kernel_file();
  bool moves_to_kernel(uint32_t command, const uint8_t* in, size_t in_length, uint32_t id);
  int adopt_into_kernel(uint32_t id);
  int create_kernel_id(const Id& id, uint32_t& kernel_id);
  int forward(uint32_t command, const uint8_t* in, size_t in_length, size_t out_length,
              size_t id_offset, uint32_t kernel_id);
  int forward_destroy(uint32_t id, uint64_t response);
  int forward_join(uint32_t command, const uint8_t* in, size_t in_length, size_t out_length,
                   uint32_t id, uint32_t kernel_id);
  int forward_leave(uint32_t multicast, uint32_t kernel_multicast, uint64_t response);
  void listen_on_kernel_too(uint32_t id, uint32_t backlog);
  static bool has_device_address(const cm::IpEndpoint& address);
  int hold_port_on_kernel(uint32_t id, const cm::IpEndpoint& address);
  // Ties a kernel id just made for our id `handle` to it: `record` notes it
  // in the id, under the lock. When the id went meanwhile, the kernel id is
  // destroyed and ENOENT returned.
  int record_kernel_id(uint32_t handle, uint32_t kernel_id, const std::function<void(Id&)>& record);
  void drop_kernel_hold(uint32_t id);
  int migrate_kernel_id(CmFile& source, uint32_t id, bool& forwarded);
  void destroy_kernel_id(uint32_t kernel_id);
  void on_kernel_event(const rdma_ucm_event_resp& event);
  void queue_kernel_event_locked(const rdma_ucm_event_resp& event);
  void record_option(uint32_t id, uint32_t level, uint32_t name, const uint8_t* value,
                     size_t length);

  bool has_id(uint32_t id);
  // Queues an event and makes the file readable.
  void post_event(CmFileEvent event);
  void wait_for_event_thread(std::unique_lock<std::mutex>& lock);
  // Makes the fd readable exactly while events wait; after every change.
  void update_readiness();
  // Takes `listen_id`'s unread connection requests off the file, and lets
  // their ids go (release_requests, without the file's lock).
  struct PendingRequest {
    uint32_t id = 0;
    std::optional<uint32_t> kernel_id;  // a request the kernel's CM made
  };
  std::vector<PendingRequest> drop_pending_requests(uint32_t listen_id);
  void release_requests(const std::vector<PendingRequest>& requests);

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
    std::optional<uint32_t> kernel_id;  // a forwarded id's join: the kernel's mc handle
  };
  std::map<uint32_t, Multicast> multicasts_;
  // Apart from id handles, so an event names one or the other.
  uint32_t next_multicast_ = 0x80000000;

  // The kernel's file, opened at the first id it serves. -1: not asked
  // yet whether this host has kernel RDMA devices; 0 no; 1 yes.
  int kernel_present_ = -1;
  std::unique_ptr<KernelRdmaCm> kernel_;
  std::map<uint32_t, uint32_t> kernel_ids_;         // kernel handle -> ours
  std::map<uint32_t, uint32_t> kernel_multicasts_;  // kernel mc handle -> ours
  std::vector<rdma_ucm_event_resp> early_multicast_events_;
  // Handles for ids the kernel made (connection requests), apart from the
  // connection manager's.
  uint32_t next_kernel_alias_ = 0x40000000;
};

}  // namespace softverbs::provider
