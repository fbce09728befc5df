#include "harness/cli/usage.h"

#include "harness/cli/exit_codes.h"

namespace softverbs::cli {

void print_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs COMMAND [ARGS...]\n"
      "\n"
      "Runs unmodified libibverbs programs on software-emulated RDMA devices.\n"
      "\n"
      "commands:\n"
      "  run [--devices N] [--[no-]device-files] [--seed N] [--trace DIR]\n"
      "      -- PROGRAM [ARGS...]\n"
      "                 run PROGRAM with libsoftverbs.so preloaded, so its verbs\n"
      "                 calls reach the soft devices (softverbs0, softverbs1, ...)\n"
      "  devices [--devices N]\n"
      "                 list the soft devices: name, node GUID, link layer, LID, GID 0\n"
      "  listeners      the RDMA CM ports running programs listen on (librdmacm)\n"
      "  stats [--pid PID]\n"
      "                 protocol, wire and fault counters of running programs\n"
      "  fault [--pid PID] show | clear | set 'PLAN' | set --file FILE\n"
      "                 inject drops, duplicates, reordering, delay, corruption\n"
      "                 into a running program's wire (docs/faults.md)\n"
      "  port [--pid PID] DEVICE [PORT] up|down\n"
      "                 take a soft port down or up (IBV_EVENT_PORT_ERR/ACTIVE)\n"
      "  rnr [--pid PID] off|all|QPN\n"
      "                 answer every SEND with an RNR NAK (all QPs or one)\n"
      "  reset [--force]\n"
      "                 remove this user's shared registry and mailboxes\n"
      "  topo [--name NAME] up N [--mtu B] | down | show | exec N -- PROGRAM...\n"
      "                 hosts on this machine (network namespaces, root) for the\n"
      "                 UDP wire between RoCE devices\n"
      "  capture -o FILE [--device NAME] [--qp N]... -- PROGRAM [ARGS...]\n"
      "                 run PROGRAM with every packet of its soft devices written\n"
      "                 to FILE (pcapng as RoCEv2, for tshark/Wireshark)\n"
      "  capture --pid PID -o FILE [--seconds S] [--device NAME] [--qp N]...\n"
      "                 the same for a running program, until Ctrl-C or S seconds\n"
      "  trace diff DIR_A DIR_B\n"
      "                 whether two runs traced with run --trace took the same\n"
      "                 protocol path, and where they parted\n"
      "  help [COMMAND] show this text, or the text of one command (also:\n"
      "                 softverbs COMMAND --help)\n"
      "  --version      the version of softverbs\n"
      "\n"
      "environment:\n"
      "  SOFTVERBS_DEVICES      number of soft devices, 0..16 (default 1)\n"
      "  SOFTVERBS_LINK_LAYER   ib (default) or eth (RoCE) for every device, or a\n"
      "                         list, one per device: ib,eth\n"
      "  SOFTVERBS_SHM_PREFIX   /dev/shm segment name prefix (default softverbs)\n"
      "  SOFTVERBS_LIBRARY      path of libsoftverbs.so, if not next to this program\n"
      "  SOFTVERBS_FAULTS       fault plan applied from the start (docs/faults.md)\n"
      "  SOFTVERBS_FAULTS_FILE  file holding a fault plan\n"
      "  SOFTVERBS_FAULT_SEED   the fault plan's seed, in place of its own\n"
      "  SOFTVERBS_TRACE        directory of each QP's protocol trace (run --trace)\n"
      "  (every variable: man 7 softverbs, or docs/user-guide.md#environment)\n"
      "\n"
      "exit status:\n"
      "  0              the command did what was asked\n"
      "  1              it failed, saying why on stderr\n"
      "  2              a wrong command line or SOFTVERBS_* value: nothing was started\n"
      "  run, capture, topo exec\n"
      "                 the program's own status; 126 when it cannot be executed,\n"
      "                 127 when it is not found\n"
      "\n"
      "example: softverbs run -- ibv_devinfo -v\n",
      out);
}

void print_run_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs run [--devices N] [--[no-]device-files] [--seed N] [--trace DIR]\n"
      "                     -- PROGRAM [ARGS...]\n"
      "\n"
      "Starts PROGRAM with libsoftverbs.so added in front of LD_PRELOAD. PROGRAM's\n"
      "exit status is softverbs's; 127 when PROGRAM is not found.\n"
      "\n"
      "  --devices N         number of soft devices PROGRAM sees (sets SOFTVERBS_DEVICES)\n"
      "  --device-files      run PROGRAM in a mount namespace of its own where the soft\n"
      "                      devices have the files a kernel device has\n"
      "                      (/sys/class/infiniband/<dev>/..., /dev/infiniband/uverbs_<dev>),\n"
      "                      for tools such as ucx_info that look there; without root\n"
      "                      this needs a user namespace, and then long messages to\n"
      "                      programs of other `softverbs run`s go without the one-copy\n"
      "                      path (SOFTVERBS_DEVICE_FILES=1)\n"
      "  --no-device-files   never (SOFTVERBS_DEVICE_FILES=0); by default the files are\n"
      "                      made when that needs no user namespace (as root)\n"
      "  --seed N            the seed of the fault plan (SOFTVERBS_FAULTS) in every\n"
      "                      process of the run, in place of the plan's own\n"
      "                      (SOFTVERBS_FAULT_SEED); with a plan, the seed in force is\n"
      "                      printed at the start, so a failing run can be run again\n"
      "  --trace DIR         each QP of every process of the run writes its protocol\n"
      "                      events to DIR (SOFTVERBS_TRACE; made if missing), to\n"
      "                      compare with another run: softverbs trace diff\n"
      "\n"
      "example: softverbs run -- ibv_rc_pingpong -d softverbs0\n",
      out);
}

void print_devices_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs devices [--devices N]\n"
      "\n"
      "Lists the soft devices that programs started with `softverbs run` see.\n"
      "\n"
      "  --devices N   list N devices instead of SOFTVERBS_DEVICES (default 1)\n",
      out);
}

void print_listeners_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs listeners\n"
      "\n"
      "Lists the ports that programs running under softverbs (as this user, with\n"
      "the same SOFTVERBS_SHM_PREFIX) listen on with librdmacm (rdma_listen):\n"
      "port space (tcp, udp, ib, ipoib), address (* for any) and port, and pid.\n"
      "\n"
      "example: softverbs listeners | grep ':7174 '\n",
      out);
}

void print_reset_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs reset [--force]\n"
      "\n"
      "Removes this user's shared registry (/dev/shm/<prefix>-<uid>-registry, for\n"
      "the current SOFTVERBS_SHM_PREFIX) and the mailboxes named after it, so the\n"
      "next program starts afresh. For a registry another softverbs version made,\n"
      "or one damaged beyond use (programs then fail to open a device, saying so).\n"
      "Refused while softverbs processes are attached, unless --force: they keep\n"
      "running but cannot reach programs started afterwards.\n",
      out);
}

void print_topo_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs topo [--name NAME] up N [--mtu BYTES]\n"
      "       softverbs topo [--name NAME] exec N -- PROGRAM [ARGS...]\n"
      "       softverbs topo [--name NAME] show | down\n"
      "\n"
      "Makes N hosts on this machine for RoCE soft devices to reach each other over\n"
      "the UDP wire: network namespaces NAME-host1..N (NAME: sv unless given), each\n"
      "with an interface sv0 at 198.18.0.<n>/24 and fd00:5376::<n>/64, joined by a\n"
      "bridge in the namespace NAME-fabric, with jumbo frames (--mtu, default 9000:\n"
      "RoCE devices get a 4096-byte MTU). Nothing of the machine's own network\n"
      "changes. 'exec' runs PROGRAM in host n with its own registry\n"
      "(SOFTVERBS_SHM_PREFIX=<prefix>-NAME-host<n>), as a separate machine would\n"
      "have; 'down' removes every namespace of the topology. Needs root.\n"
      "\n"
      "example:\n"
      "  softverbs topo up 2\n"
      "  SOFTVERBS_LINK_LAYER=eth softverbs topo exec 2 -- softverbs run -- ibv_rc_pingpong -g 3 &\n"
      "  SOFTVERBS_LINK_LAYER=eth softverbs topo exec 1 -- softverbs run -- ibv_rc_pingpong -g 3 198.18.0.2\n"
      "  softverbs topo down\n",
      out);
}

void print_capture_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs capture -o FILE [--device NAME] [--qp N]... [--limit-mb N]\n"
      "                         -- PROGRAM [ARGS...]\n"
      "       softverbs capture --pid PID -o FILE [--seconds S] [--device NAME]\n"
      "                         [--qp N]... [--limit-mb N]\n"
      "\n"
      "Runs PROGRAM as 'softverbs run' does and writes every packet its soft devices\n"
      "send and receive, on every wire (shared memory and UDP), to FILE in pcapng,\n"
      "as on a network: Ethernet, IPv4 or IPv6, UDP 4791, BTH..., ICRC (packets of\n"
      "InfiniBand devices between their ports' fe80:: GIDs, without the LRH).\n"
      "A packet a fault plan dropped, duplicated, corrupted or delayed carries a\n"
      "comment saying so. Long messages travel as separate packets while capturing.\n"
      "A second process of the program (a child) writes FILE-<pid> beside it.\n"
      "\n"
      "With --pid, captures a program of this user that is already running, from\n"
      "now until Ctrl-C, S seconds, or the program's end; the program writes FILE.\n"
      "\n"
      "  --device NAME   only packets from or to this soft device\n"
      "  --qp N          only packets addressed to QP N (repeat for more QPs)\n"
      "  --limit-mb N    stop writing after N MiB (default 256)\n"
      "  --pid PID       the running program (softverbs stats lists them)\n"
      "  --seconds S     with --pid: stop after S seconds\n"
      "\n"
      "examples:\n"
      "  softverbs capture -o server.pcapng -- ibv_rc_pingpong &\n"
      "  softverbs run -- ibv_rc_pingpong localhost\n"
      "  tshark -r server.pcapng\n"
      "  softverbs capture --pid 1234 -o now.pcapng --seconds 5\n",
      out);
}

void print_trace_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs trace diff DIR_A DIR_B\n"
      "\n"
      "Compares two runs traced with `softverbs run --trace DIR` (or SOFTVERBS_TRACE=DIR):\n"
      "whether every QP's requester, completer and responder did the same, event for\n"
      "event, and where they did not, the first event at which they parted. Processes\n"
      "are paired by program name and their traces, not by pid. Exit status: 0 the\n"
      "same path, 1 different paths, 2 a directory could not be read.\n"
      "\n"
      "A run under a fault plan replays its path from its seed (docs/faults.md):\n"
      "  softverbs run --seed 7 --trace run1 -- ./test\n"
      "  softverbs run --seed 7 --trace run2 -- ./test\n"
      "  softverbs trace diff run1 run2\n",
      out);
}

void print_control_usage(std::FILE* out) {
  std::fputs(
      "usage: softverbs stats [--pid PID]...\n"
      "       softverbs fault [--pid PID] show | clear | set 'PLAN' | set --file FILE\n"
      "       softverbs port [--pid PID] DEVICE [PORT] up|down\n"
      "       softverbs rnr [--pid PID] off|all|QPN\n"
      "\n"
      "Talks to programs running under softverbs (as this user, with the same\n"
      "SOFTVERBS_SHM_PREFIX) through their control sockets. Without --pid, stats\n"
      "asks every such program; the others need --pid when more than one runs.\n"
      "\n"
      "examples:\n"
      "  softverbs fault --pid 1234 set 'seed=7; drop:p=0.01'\n"
      "  softverbs stats --pid 1234 | grep retransmitted\n"
      "  softverbs port --pid 1234 softverbs0 down\n",
      out);
}

int usage_error(std::string_view problem, std::string_view hint) {
  std::fprintf(stderr, "softverbs: %.*s\n", static_cast<int>(problem.size()), problem.data());
  if (hint.empty()) {
    std::fputs("\n", stderr);
    print_usage(stderr);
  } else {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(hint.size()), hint.data());
  }
  return kExitUsage;
}

}  // namespace softverbs::cli
