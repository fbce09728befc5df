#!/usr/bin/python3
"""Two processes talk through pyverbs (rdma-core's Python bindings) over a
connection its librdmacm wrappers make, as rdma-core's own test suite does:
the address comes from the device's /sys/class/infiniband/<dev>/device/net/,
the server listens on it, the client connects, and they exchange SENDs,
an RDMA WRITE and an RDMA READ whose bytes both sides check.

Usage: pyverbs_rdma_cm.py DEVICE PORT ROUNDS
Exits 0 when every byte arrived as sent, 1 with the reason otherwise.
"""
import json
import os
import signal
import subprocess
import sys

import pyverbs.cm_enums as ce
import pyverbs.enums as e
from pyverbs.cmid import CMID, AddrInfo
from pyverbs.qp import QPCap, QPInitAttr

MESSAGE_BYTES = 256
REMOTE_BYTES = 64 * 1024
SECONDS_ALLOWED = 60


def device_address(device):
    """The first IPv4 address of the first net device the RDMA device lists,
    the way rdma-core's tests/base.py finds the address it connects to."""
    net = f'/sys/class/infiniband/{device}/device/net'
    interfaces = sorted(os.listdir(net))
    if not interfaces:
        raise RuntimeError(f'{net} is empty')
    shown = json.loads(subprocess.check_output(
        ['ip', '-j', '-4', 'addr', 'show', 'dev', interfaces[0]]))
    return shown[0]['addr_info'][0]['local']


def qp_attributes():
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap)


def message(round_number):
    return bytes((round_number * 7 + i) % 251 for i in range(MESSAGE_BYTES))


def remote_pattern():
    return bytes((i * 13 + 5) % 256 for i in range(REMOTE_BYTES))


def expect(what, got, wanted):
    if got != wanted:
        raise RuntimeError(f'{what}: got {got[:16]!r}..., wanted {wanted[:16]!r}...')


def completed(what, wc):
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        status = 'none' if wc is None else wc.status
        raise RuntimeError(f'{what}: completion status {status}')


def serve(address, port, rounds, to_client):
    info = AddrInfo(src=address, src_service=port, port_space=ce.RDMA_PS_TCP,
                    flags=ce.RAI_PASSIVE)
    listener = CMID(creator=info, qp_init_attr=qp_attributes())
    listener.listen()
    os.write(to_client, b'listening\n')
    peer = listener.get_request()
    inbox = peer.reg_msgs(MESSAGE_BYTES)
    outbox = peer.reg_msgs(MESSAGE_BYTES)
    # A receive is always posted before the client can send: without one
    # the client's SEND would meet an RNR NAK and wait the 655 ms that the
    # connection manager's min_rnr_timer of 0 stands for, as on an HCA.
    peer.post_recv(inbox)
    peer.accept()
    target = peer.reg_write(REMOTE_BYTES)
    target.write(bytes(REMOTE_BYTES), REMOTE_BYTES)
    source = peer.reg_read(REMOTE_BYTES)
    source.write(remote_pattern()[::-1], REMOTE_BYTES)
    os.write(to_client, f'{target.rkey} {target.buf} {source.rkey} {source.buf}\n'.encode())
    for round_number in range(rounds):
        completed('receive', peer.get_recv_comp())
        expect(f'message {round_number}', inbox.read(MESSAGE_BYTES, 0), message(round_number))
        outbox.write(message(round_number)[::-1], MESSAGE_BYTES)
        peer.post_recv(inbox)
        peer.post_send(outbox)
        completed('echo', peer.get_send_comp())
    # The client's last SEND says its WRITE and READ are done.
    completed('final receive', peer.get_recv_comp())
    expect('bytes the client wrote', target.read(REMOTE_BYTES, 0), remote_pattern())
    peer.disconnect()


def connect(address, port, rounds, from_server):
    incoming = os.fdopen(from_server)
    if incoming.readline().strip() != 'listening':
        raise RuntimeError('the server did not start listening')
    info = AddrInfo(dst=address, dst_service=port, port_space=ce.RDMA_PS_TCP)
    cmid = CMID(creator=info, qp_init_attr=qp_attributes())
    cmid.connect()
    target_rkey, target_address, source_rkey, source_address = (
        int(field) for field in incoming.readline().split())
    inbox = cmid.reg_msgs(MESSAGE_BYTES)
    outbox = cmid.reg_msgs(MESSAGE_BYTES)
    for round_number in range(rounds):
        cmid.post_recv(inbox)
        outbox.write(message(round_number), MESSAGE_BYTES)
        cmid.post_send(outbox)
        completed('send', cmid.get_send_comp())
        completed('echo receive', cmid.get_recv_comp())
        expect(f'echo {round_number}', inbox.read(MESSAGE_BYTES, 0),
               message(round_number)[::-1])
    written = cmid.reg_msgs(REMOTE_BYTES)
    written.write(remote_pattern(), REMOTE_BYTES)
    cmid.post_write(written, REMOTE_BYTES, target_address, target_rkey,
                    flags=e.IBV_SEND_SIGNALED)
    completed('RDMA WRITE', cmid.get_send_comp())
    read = cmid.reg_msgs(REMOTE_BYTES)
    cmid.post_read(read, REMOTE_BYTES, source_address, source_rkey, flags=e.IBV_SEND_SIGNALED)
    completed('RDMA READ', cmid.get_send_comp())
    expect('bytes read', read.read(REMOTE_BYTES, 0), remote_pattern()[::-1])
    cmid.post_send(outbox)
    completed('final send', cmid.get_send_comp())


def main():
    device, port, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    address = device_address(device)
    from_server, to_client = os.pipe()
    server = os.fork()
    if server == 0:
        os.close(from_server)
        signal.alarm(SECONDS_ALLOWED)
        try:
            serve(address, port, rounds, to_client)
        except Exception as problem:  # the reason goes to the test's log
            print(f'server: {problem}', file=sys.stderr)
            os._exit(1)
        os._exit(0)
    os.close(to_client)
    signal.alarm(SECONDS_ALLOWED)
    try:
        connect(address, port, rounds, from_server)
    except Exception as problem:
        print(f'client: {problem}', file=sys.stderr)
        os.kill(server, signal.SIGKILL)
        os.waitpid(server, 0)
        return 1
    _, status = os.waitpid(server, 0)
    if status != 0:
        print(f'server ended with status {status:#x}', file=sys.stderr)
        return 1
    print(f'{address} on {device}: {rounds} SEND round trips of {MESSAGE_BYTES} B, '
          f'an RDMA WRITE and READ of {REMOTE_BYTES} B, every byte as sent')
    return 0


if __name__ == '__main__':
    sys.exit(main())
