/*
 * service/base/util.h - the small pure helpers the service's files share,
 * one header per group: clock.h, ids.h, codec.h (base64, UTF-8), hash.h
 * (SHA-256, CRC-32), files.h (durable writes) and socket.h (peer state).
 * Include the one you need; this umbrella is for files that use several.
 *
 * Nothing here keeps state except the random source (getrandom, no state of
 * its own); every function is safe on any thread.
 */
#ifndef SVC_UTIL_H
#define SVC_UTIL_H

#include "clock.h"
#include "codec.h"
#include "files.h"
#include "hash.h"
#include "ids.h"
#include "socket.h"

#endif
