/*
 * service/base/socket.h - what a client's socket says without reading it: the
 * one probe the long replies use to notice a client that went away.
 */
#ifndef SVC_SOCKET_H
#define SVC_SOCKET_H

/* What a read watch on a client's socket saw, without consuming it:
 * SVC_PEER_CLOSED (EOF or a socket error), SVC_PEER_SENT (bytes wait: a
 * pipelined request) or SVC_PEER_QUIET (nothing yet). */
enum { SVC_PEER_QUIET = 0, SVC_PEER_SENT = 1, SVC_PEER_CLOSED = 2 };
int svc_peer_state(int fd);

#endif
