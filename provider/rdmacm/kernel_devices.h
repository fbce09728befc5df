// Which IP addresses belong to the kernel's RDMA devices: those of a net
// device that a kernel RDMA device sits on (a RoCE HCA's or rxe's netdev,
// an IPoIB interface of an HCA). An rdma_cm id bound to such an address,
// or resolving toward a destination reached through one, is the kernel
// CM's to serve; every other address (loopback, a net device without an
// RDMA device) is the soft devices'. Read from sysfs and getifaddrs(3) at
// each question: asked only when an id binds or resolves.
#pragma once

#include <sys/socket.h>

namespace softverbs::provider {

// Whether this host has a kernel RDMA device on some net device, and the
// kernel's rdma_cm file to reach it.
bool kernel_rdma_present();

// The any address or loopback, which bind to no device (the kernel's rule),
// or no IP address at all.
bool is_any_or_loopback(const sockaddr* address);

// Whether `address` (AF_INET or AF_INET6) is on a net device of a kernel
// RDMA device. The any address and loopback never are.
bool kernel_owns_address(const sockaddr* address);

// Whether the kernel's routing leaves for `destination` from an address a
// kernel RDMA device owns (a destination on this host: the device that
// owns it). Asks the kernel with a connected UDP socket; sends nothing.
bool kernel_reaches(const sockaddr* destination);

}  // namespace softverbs::provider
