#!/bin/sh
# healthcheck: does a corral service answer? The images' HEALTHCHECK and
# compose.yaml's healthchecks run it.
#   healthcheck http URL     the gateway: URL answers with a 2xx status
#   healthcheck ipc SOCKET   the scheduler or registry: something listens on
#                            the bus socket (a file left by a dead process
#                            refuses the connection)
set -u
case "${1:-}" in
http)
    [ $# -eq 2 ] || { echo "usage: healthcheck http URL" >&2; exit 2; }
    exec curl --fail --silent --show-error --max-time 4 --output /dev/null "$2"
    ;;
ipc)
    [ $# -eq 2 ] || { echo "usage: healthcheck ipc SOCKET" >&2; exit 2; }
    [ -S "$2" ] || { echo "healthcheck: no socket at $2" >&2; exit 1; }
    # curl connects and sends a request ZeroMQ does not speak; the listener
    # drops it. Only exit 7 (could not connect) means nobody is listening.
    curl --silent --max-time 2 --unix-socket "$2" --output /dev/null \
        http://corral-bus/ 2>/dev/null
    rc=$?
    if [ "$rc" -eq 7 ]; then
        echo "healthcheck: nothing listens on $2" >&2
        exit 1
    fi
    exit 0
    ;;
*)
    echo "usage: healthcheck http URL | healthcheck ipc SOCKET" >&2
    exit 2
    ;;
esac
