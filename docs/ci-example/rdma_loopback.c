/* A verbs test as projects keep them: two RC QPs of one process connected
 * to each other, an RDMA WRITE and a SEND between them, the data checked.
 * It finds its device and GID index itself, which is what a job needs when
 * it no longer runs `rdma link` after loading rxe:
 *
 *   RDMA_DEVICE  the device (default: the first one libibverbs lists)
 *   GID_INDEX    the GID index (default: on RoCE the first RoCE v2 GID
 *                with an IPv4 address, else the first RoCE v2 GID; on
 *                InfiniBand 0)
 *
 * The same binary runs on rxe, on an HCA, and under `softverbs run`.
 */
#include <infiniband/verbs.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kBytes = 4096, kPort = 1 };

static int fail(const char *what) {
  fprintf(stderr, "rdma_loopback: %s\n", what);
  return 1;
}

static struct ibv_device *find_device(struct ibv_device **list, const char *wanted) {
  for (int i = 0; list[i]; ++i)
    if (!wanted || strcmp(ibv_get_device_name(list[i]), wanted) == 0) return list[i];
  return NULL;
}

static int is_ipv4_mapped(const union ibv_gid *gid) {
  static const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(gid->raw, prefix, sizeof prefix) == 0;
}

/* The GID index rxe jobs used to read from `rdma link` and sysfs. */
static int choose_gid_index(struct ibv_context *context, const struct ibv_port_attr *port) {
  const char *forced = getenv("GID_INDEX");
  if (forced) return atoi(forced);
  if (port->link_layer != IBV_LINK_LAYER_ETHERNET) return 0;
  int any_v2 = -1;
  for (int i = 0; i < port->gid_tbl_len; ++i) {
    struct ibv_gid_entry entry;
    if (ibv_query_gid_ex(context, kPort, i, &entry, 0)) continue;
    if (entry.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    if (is_ipv4_mapped(&entry.gid)) return i;
    if (any_v2 < 0) any_v2 = i;
  }
  return any_v2;
}

static int to_rts(struct ibv_qp *qp, uint32_t remote_qpn, const struct ibv_port_attr *port,
                  const union ibv_gid *gid, int gid_index) {
  struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = kPort,
                             .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return -1;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = remote_qpn;
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = kPort;
  attr.ah_attr.dlid = port->lid;
  if (port->link_layer == IBV_LINK_LAYER_ETHERNET) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = *gid;
    attr.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    attr.ah_attr.grh.hop_limit = 1;
  }
  if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = 0;
  attr.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Waits for one completion and checks its status. */
static int complete_one(struct ibv_cq *cq, const char *what) {
  struct ibv_wc wc;
  int n;
  const time_t deadline = time(NULL) + 10;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
    if (time(NULL) > deadline) return fail("no completion within 10 s");
  if (n < 0) return fail("ibv_poll_cq failed");
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "rdma_loopback: %s completed with %s\n", what, ibv_wc_status_str(wc.status));
    return 1;
  }
  return 0;
}

int main(void) {
  int devices = 0;
  struct ibv_device **list = ibv_get_device_list(&devices);
  if (!list || devices == 0) return fail("no RDMA device (under softverbs: run me with `softverbs run --`)");
  struct ibv_device *device = find_device(list, getenv("RDMA_DEVICE"));
  if (!device) return fail("no device named by RDMA_DEVICE");
  struct ibv_context *context = ibv_open_device(device);
  if (!context) return fail("ibv_open_device failed");
  struct ibv_port_attr port;
  if (ibv_query_port(context, kPort, &port)) return fail("ibv_query_port failed");
  const int gid_index = choose_gid_index(context, &port);
  union ibv_gid gid;
  if (gid_index < 0 || ibv_query_gid(context, kPort, gid_index, &gid))
    return fail("no usable GID (RoCE needs a RoCE v2 GID; set GID_INDEX)");

  struct ibv_pd *pd = ibv_alloc_pd(context);
  struct ibv_cq *cq = pd ? ibv_create_cq(context, 8, NULL, NULL, 0) : NULL;
  char *source = calloc(1, kBytes), *target = calloc(1, kBytes), *received = calloc(1, kBytes);
  if (!cq || !source || !target || !received) return fail("ibv_alloc_pd/ibv_create_cq failed");
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  struct ibv_mr *source_mr = ibv_reg_mr(pd, source, kBytes, access);
  struct ibv_mr *target_mr = ibv_reg_mr(pd, target, kBytes, access);
  struct ibv_mr *received_mr = ibv_reg_mr(pd, received, kBytes, access);
  if (!source_mr || !target_mr || !received_mr) return fail("ibv_reg_mr failed");

  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *a = ibv_create_qp(pd, &init), *b = ibv_create_qp(pd, &init);
  if (!a || !b) return fail("ibv_create_qp failed");
  if (to_rts(a, b->qp_num, &port, &gid, gid_index) || to_rts(b, a->qp_num, &port, &gid, gid_index))
    return fail("connecting the QPs failed");

  for (int i = 0; i < kBytes; ++i) source[i] = (char)(i * 7 + 3);
  struct ibv_sge receive_sge = {(uintptr_t)received, kBytes, received_mr->lkey};
  struct ibv_recv_wr receive = {.wr_id = 1, .sg_list = &receive_sge, .num_sge = 1}, *bad_receive;
  if (ibv_post_recv(b, &receive, &bad_receive)) return fail("ibv_post_recv failed");

  struct ibv_sge sge = {(uintptr_t)source, kBytes, source_mr->lkey};
  struct ibv_send_wr write = {.wr_id = 2, .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
  write.wr.rdma.remote_addr = (uintptr_t)target;
  write.wr.rdma.rkey = target_mr->rkey;
  struct ibv_send_wr send = {.wr_id = 3, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
  struct ibv_send_wr *bad;
  if (ibv_post_send(a, &write, &bad) || complete_one(cq, "the RDMA WRITE")) return 1;
  if (ibv_post_send(a, &send, &bad)) return fail("ibv_post_send failed");
  if (complete_one(cq, "the SEND or its receive") || complete_one(cq, "the SEND or its receive"))
    return 1;
  if (memcmp(source, target, kBytes) || memcmp(source, received, kBytes))
    return fail("the bytes that arrived are not the bytes sent");

  printf("rdma_loopback: %s port %d GID index %d (%s): %d bytes written and sent, data checked\n",
         ibv_get_device_name(device), kPort, gid_index,
         port.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", kBytes);
  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_dereg_mr(source_mr);
  ibv_dereg_mr(target_mr);
  ibv_dereg_mr(received_mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(context);
  ibv_free_device_list(list);
  free(source);
  free(target);
  free(received);
  return 0;
}
