/* A program that reaches libibverbs the way NCCL and plugin loaders do:
 * dlopen("libibverbs.so.1") with RTLD_LOCAL (or RTLD_GLOBAL with --global),
 * every verb taken from that handle with dlsym() or dlvsym(..., "IBVERBS_1.1").
 * Run under `softverbs run`, it must find a soft device on that handle and
 * move a message over RC between two of its QPs, byte for byte.
 *
 * Built twice: unlinked (the handle is the only way in), and linked against
 * libibverbs with ALSO_LINKED, where it also checks that the linked and the
 * dlopen'ed entry points are one and the same implementation.
 *
 * Exit status 0 when everything held; 1 with a message naming what did not. */
#define _GNU_SOURCE /* dlvsym */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MESSAGE_SIZE 4096

struct verbs {
  __typeof__(&ibv_get_device_list) get_device_list;
  __typeof__(&ibv_free_device_list) free_device_list;
  __typeof__(&ibv_get_device_name) get_device_name;
  __typeof__(&ibv_open_device) open_device;
  __typeof__(&ibv_close_device) close_device;
  /* Exported as taking the older, shorter struct _compat_ibv_port_attr,
   * a prefix of struct ibv_port_attr. */
  int (*query_port)(struct ibv_context*, uint8_t, struct ibv_port_attr*);
  __typeof__(&ibv_alloc_pd) alloc_pd;
  __typeof__(&ibv_dealloc_pd) dealloc_pd;
  __typeof__(&ibv_reg_mr) reg_mr;
  __typeof__(&ibv_dereg_mr) dereg_mr;
  __typeof__(&ibv_create_cq) create_cq;
  __typeof__(&ibv_destroy_cq) destroy_cq;
  __typeof__(&ibv_create_qp) create_qp;
  __typeof__(&ibv_modify_qp) modify_qp;
  __typeof__(&ibv_destroy_qp) destroy_qp;
};

struct side {
  struct ibv_cq* cq;
  struct ibv_qp* qp;
};

static int fail(const char* what) {
  fprintf(stderr, "dlopen_verbs_test: %s\n", what);
  return 1;
}

/* Half the verbs by plain name, half at the version node rdma-core exports
 * them at, as programs do both. */
static int resolve(void* handle, struct verbs* v) {
#define BY_NAME(field, name) v->field = (__typeof__(v->field))dlsym(handle, name)
#define BY_VERSION(field, name) v->field = (__typeof__(v->field))dlvsym(handle, name, "IBVERBS_1.1")
  BY_VERSION(get_device_list, "ibv_get_device_list");
  BY_VERSION(free_device_list, "ibv_free_device_list");
  BY_NAME(get_device_name, "ibv_get_device_name");
  BY_VERSION(open_device, "ibv_open_device");
  BY_NAME(close_device, "ibv_close_device");
  BY_VERSION(query_port, "ibv_query_port");
  BY_NAME(alloc_pd, "ibv_alloc_pd");
  BY_VERSION(dealloc_pd, "ibv_dealloc_pd");
  BY_VERSION(reg_mr, "ibv_reg_mr");
  BY_NAME(dereg_mr, "ibv_dereg_mr");
  BY_VERSION(create_cq, "ibv_create_cq");
  BY_NAME(destroy_cq, "ibv_destroy_cq");
  BY_NAME(create_qp, "ibv_create_qp");
  BY_VERSION(modify_qp, "ibv_modify_qp");
  BY_VERSION(destroy_qp, "ibv_destroy_qp");
#undef BY_NAME
#undef BY_VERSION
  void** slots = (void**)v;
  for (size_t i = 0; i < sizeof(*v) / sizeof(void*); ++i)
    if (!slots[i]) return fail("a verb is missing from the dlopen'ed handle");
  return 0;
}

static struct ibv_device* first_soft_device(const struct verbs* v, struct ibv_device** list) {
  for (; list && *list; ++list)
    if (strncmp(v->get_device_name(*list), "softverbs", 9) == 0) return *list;
  return NULL;
}

static int to_rts(const struct verbs* v, struct ibv_qp* qp, uint32_t remote_qpn, uint16_t lid) {
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  if (v->modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return fail("modify_qp to INIT failed");
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = remote_qpn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 1;
  attr.ah_attr.dlid = lid;
  attr.ah_attr.port_num = 1;
  if (v->modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER))
    return fail("modify_qp to RTR failed");
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  if (v->modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    return fail("modify_qp to RTS failed");
  return 0;
}

/* One completion from `cq` within ten seconds, successful and of `opcode`. */
static int expect_completion(struct ibv_cq* cq, enum ibv_wc_opcode opcode, uint32_t* byte_len) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  struct ibv_wc wc;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);  /* inline: the context's poll_cq op */
    if (n < 0) return fail("ibv_poll_cq failed");
    if (n == 1) break;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 10) return fail("no completion within 10 s");
  }
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "dlopen_verbs_test: completion status %d\n", (int)wc.status);
    return 1;
  }
  if (wc.opcode != opcode) return fail("completion of the wrong opcode");
  if (byte_len) *byte_len = wc.byte_len;
  return 0;
}

static int send_between(const struct verbs* v, struct ibv_pd* pd, struct side* a,
                        struct side* b) {
  static char buffer[2 * MESSAGE_SIZE];
  char* out = buffer;
  char* in = buffer + MESSAGE_SIZE;
  for (int i = 0; i < MESSAGE_SIZE; ++i) out[i] = (char)(i * 7 + 3);
  memset(in, 0, MESSAGE_SIZE);
  struct ibv_mr* mr = v->reg_mr(pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) return fail("reg_mr failed");

  struct ibv_sge recv_sge = {(uintptr_t)in, MESSAGE_SIZE, mr->lkey};
  struct ibv_recv_wr recv_wr = {.wr_id = 2, .sg_list = &recv_sge, .num_sge = 1};
  struct ibv_recv_wr* bad_recv = NULL;
  struct ibv_sge send_sge = {(uintptr_t)out, MESSAGE_SIZE, mr->lkey};
  struct ibv_send_wr send_wr = {.wr_id = 1, .sg_list = &send_sge, .num_sge = 1,
                                .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
  struct ibv_send_wr* bad_send = NULL;
  uint32_t received = 0;
  int status = 0;
  if (ibv_post_recv(b->qp, &recv_wr, &bad_recv)) status = fail("ibv_post_recv failed");
  else if (ibv_post_send(a->qp, &send_wr, &bad_send)) status = fail("ibv_post_send failed");
  else if (expect_completion(a->cq, IBV_WC_SEND, NULL)) status = 1;
  else if (expect_completion(b->cq, IBV_WC_RECV, &received)) status = 1;
  else if (received != MESSAGE_SIZE) status = fail("the receive completion has the wrong length");
  else if (memcmp(in, out, MESSAGE_SIZE) != 0) status = fail("the received bytes differ");
  if (v->dereg_mr(mr)) status = fail("dereg_mr failed");
  return status;
}

static int make_side(const struct verbs* v, struct ibv_context* ctx, struct ibv_pd* pd,
                     struct side* s) {
  s->cq = v->create_cq(ctx, 4, NULL, NULL, 0);
  if (!s->cq) return fail("create_cq failed");
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof init);
  init.send_cq = s->cq;
  init.recv_cq = s->cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 2;
  init.cap.max_recv_wr = 2;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  s->qp = v->create_qp(pd, &init);
  return s->qp ? 0 : fail("create_qp failed");
}

static int loopback_send(const struct verbs* v, struct ibv_device* device) {
  struct ibv_context* ctx = v->open_device(device);
  if (!ctx) return fail("open_device failed");
  struct ibv_port_attr port;
  memset(&port, 0, sizeof port);
  struct ibv_pd* pd = NULL;
  struct side a = {0}, b = {0};
  int status = v->query_port(ctx, 1, &port) ? fail("query_port failed") : 0;
  if (!status && !(pd = v->alloc_pd(ctx))) status = fail("alloc_pd failed");
  if (!status) status = make_side(v, ctx, pd, &a) || make_side(v, ctx, pd, &b);
  if (!status) status = to_rts(v, a.qp, b.qp->qp_num, port.lid) ||
                        to_rts(v, b.qp, a.qp->qp_num, port.lid);
  if (!status) status = send_between(v, pd, &a, &b);
  struct side* sides[] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    if (sides[i]->qp && v->destroy_qp(sides[i]->qp)) status = fail("destroy_qp failed");
    if (sides[i]->cq && v->destroy_cq(sides[i]->cq)) status = fail("destroy_cq failed");
  }
  if (pd && v->dealloc_pd(pd)) status = fail("dealloc_pd failed");
  if (v->close_device(ctx)) status = fail("close_device failed");
  return status;
}

#ifdef ALSO_LINKED
/* The linked names and the handle's must be one implementation, and both
 * lists must start with the same soft device. */
static int check_linked_agrees(const struct verbs* v, struct ibv_device* soft) {
  if ((void*)v->get_device_list != (void*)&ibv_get_device_list ||
      (void*)v->open_device != (void*)&ibv_open_device)
    return fail("the linked verbs and the dlopen'ed verbs are different functions");
  int count = 0;
  struct ibv_device** list = ibv_get_device_list(&count);
  if (!list || count < 1) return fail("the linked ibv_get_device_list lists no device");
  int same = strcmp(ibv_get_device_name(list[0]), v->get_device_name(soft)) == 0;
  ibv_free_device_list(list);
  return same ? 0 : fail("the linked list does not start with the same soft device");
}
#endif

int main(int argc, char** argv) {
  int mode = RTLD_NOW | RTLD_LOCAL;
  if (argc > 1 && strcmp(argv[1], "--global") == 0) mode = RTLD_NOW | RTLD_GLOBAL;
  else if (argc > 1) return fail("usage: dlopen_verbs_test [--global]");
  void* handle = dlopen("libibverbs.so.1", mode);
  if (!handle) return fail(dlerror());
  struct verbs v;
  if (resolve(handle, &v)) return 1;
  int count = 0;
  struct ibv_device** list = v.get_device_list(&count);
  struct ibv_device* soft = first_soft_device(&v, list);
  int status = soft ? 0 : fail("no softverbs device on the dlopen'ed handle "
                               "(is it running under `softverbs run`?)");
#ifdef ALSO_LINKED
  if (!status) status = check_linked_agrees(&v, soft);
#endif
  if (!status) status = loopback_send(&v, soft);
  if (!status) printf("dlopen_verbs_test: %d-byte RC send on %s through dlopen: ok\n",
                      MESSAGE_SIZE, v.get_device_name(soft));
  if (list) v.free_device_list(list);
  return status;
}
