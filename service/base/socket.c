/*
 * service/base/socket.c - see socket.h.
 */
#include "socket.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>

int svc_peer_state(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        return SVC_PEER_SENT;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return SVC_PEER_CLOSED;
    return SVC_PEER_QUIET;
}
