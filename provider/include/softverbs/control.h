/*
 * softverbs control interface: lets a program (typically a test) inject
 * faults, take a soft port down or up, force RNR and read the protocol
 * counters of the soft devices in its own process, with the same requests
 * `softverbs fault|port|rnr|stats --pid PID` sends from outside.
 *
 * It exists only where libsoftverbs.so is loaded. Look it up at run time so
 * the same program still runs on rxe or a real HCA, and skip fault tests
 * where it is absent:
 *
 *     softverbs_control_fn control =
 *         (softverbs_control_fn)dlsym(RTLD_DEFAULT, SOFTVERBS_CONTROL_SYMBOL);
 *     if (!control) skip();
 *     char reply[4096];
 *     control("fault set seed=7; drop:p=0.05", reply, sizeof reply);
 *
 * Requests (see docs/faults.md for the fault plan syntax):
 *     stats                     counters of the engine, wire, faults, devices, QPs
 *     fault show | clear        the fault plan in force / remove it
 *     fault set PLAN            replace the fault plan
 *     port DEVICE up|down       e.g. "port softverbs0 down": IBV_EVENT_PORT_ERR
 *     rnr off|all|QPN           answer every SEND with an RNR NAK (all QPs or one)
 *
 * Returns 0 on success; EINVAL when the request was refused (the reply says
 * why, starting with "error: "); ENOSPC when the reply did not fit (it is
 * cut, still NUL-terminated); or the errno of setting up the soft HCA.
 * Thread-safe. Stable: new requests may be added, none removed.
 */
#ifndef SOFTVERBS_CONTROL_H
#define SOFTVERBS_CONTROL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SOFTVERBS_CONTROL_SYMBOL "softverbs_control"

typedef int (*softverbs_control_fn)(const char *request, char *reply, size_t reply_size);

int softverbs_control(const char *request, char *reply, size_t reply_size);

#ifdef __cplusplus
}
#endif

#endif /* SOFTVERBS_CONTROL_H */
