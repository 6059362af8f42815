"""The embedded stack's HTTP servers take a burst of connections (issue #20: 7 of 20 concurrent connections
were reset behind socketserver's default listen backlog of 5)."""

from __future__ import annotations

import socket

import pytest

from tally_local.frontdoor import FrontDoor
from tally_local.frontdoor import _Server as FrontDoorServer
from tally_local.simulator._server import _Handler as SimulatorHandler
from tally_local.simulator._server import _Server as SimulatorServer

BURST = 64


def _connections_accepted_while_busy(server: socket.socket) -> int:
    """Connect BURST clients while the server accepts nobody (as when every thread is busy): the kernel
    completes a handshake only while the listen queue has room, so this counts the backlog in effect."""
    host, port = server.getsockname()[:2]
    done, clients = 0, []
    try:
        for _ in range(BURST):
            client = socket.socket()
            client.settimeout(0.3)
            clients.append(client)
            try:
                client.connect((host, port))
                done += 1
            except OSError:  # timeout: the SYN was dropped, the queue is full
                pass
    finally:
        for client in clients:
            client.close()
    return done


def _front_door_server() -> FrontDoorServer:
    return FrontDoorServer(("127.0.0.1", 0), FrontDoor({}))


def _simulator_server() -> SimulatorServer:
    return SimulatorServer(("127.0.0.1", 0), SimulatorHandler)


@pytest.mark.parametrize(
    "make_server", [_front_door_server, _simulator_server], ids=["frontdoor", "simulator"]
)
def test_a_burst_of_connections_is_queued_not_refused(make_server):
    server = make_server()  # bound and listening, not serving
    try:
        assert _connections_accepted_while_busy(server.socket) == BURST
    finally:
        server.server_close()
