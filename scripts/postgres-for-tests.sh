# Sourced by scripts/test.sh (or by hand: `source scripts/postgres-for-tests.sh`): starts a
# private PostgreSQL server for the tests and exports REEL_TEST_POSTGRES_URL, which the
# PostgreSQL store tests need (they fail, naming this script, without it). The server is
# installed from the system's packages when missing, keeps its data under the target folder,
# is reached on a Unix socket there (REEL_TEST_POSTGRES_URL), runs with fsync off (the tests
# never need their data after a crash), and is stopped when the sourcing shell exits.
#
# TLS: the server also has `ssl = on` with a certificate for localhost signed by a CA of its
# own, both made with openssl in its data directory, and listens on a free loopback port that
# takes TLS connections only (PostgreSQL has no TLS on a Unix socket). It exports
# REEL_TEST_POSTGRES_TLS_URL (that port, no sslmode), REEL_TEST_POSTGRES_CA (the CA's
# certificate, for `sslrootcert=`) and REEL_TEST_POSTGRES_OTHER_CA (a CA that signed nothing
# the server has, for a test that a wrong CA is refused). Without openssl they stay unset.
#
# REEL_PG_FSYNC=on keeps fsync on (a benchmark's figures need the disk's real cost), and
# REEL_PG_NAME names its folder under the target folder (default pg-test), so that a
# benchmark's server and the tests' can run at once. REEL_PG_STATEMENTS=on loads
# pg_stat_statements, for `pg-bench --statements` (what a burst of short runs asks the server).
#
# PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user (which
# the packages create) and owns its directory. REEL_PG_BINDIR picks the server's binaries.

reel_pg_bindir() {
  if [ -n "${REEL_PG_BINDIR:-}" ]; then
    echo "$REEL_PG_BINDIR"
    return
  fi
  if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    pg_config --bindir
    return
  fi
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return
  fi
  # Debian keeps the server's binaries in a directory per version, off PATH.
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then
    echo "$dir"
  fi
}

reel_pg_start() {
  local bindir
  bindir=$(reel_pg_bindir)
  if [ -z "$bindir" ]; then
    echo "postgres-for-tests: installing PostgreSQL from the system's packages" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    bindir=$(reel_pg_bindir)
  fi
  if [ -z "$bindir" ]; then
    echo "postgres-for-tests: no PostgreSQL server (initdb, pg_ctl) found or installable" >&2
    return 1
  fi
  local target="${CARGO_TARGET_DIR:-target}"
  mkdir -p "$target"
  REEL_PG_DIR="$(cd "$target" && pwd)/${REEL_PG_NAME:-pg-test}"
  # A socket path must stay under ~100 bytes; a deep target folder falls back to /tmp.
  if [ ${#REEL_PG_DIR} -gt 80 ]; then
    REEL_PG_DIR=$(mktemp -d -p /tmp reel-pg-test.XXXXXX)
  fi
  # A server left running by an interrupted earlier run is stopped before its folder goes.
  if [ -f "$REEL_PG_DIR/data/postmaster.pid" ]; then
    reel_pg_as "$bindir/pg_ctl" -D "$REEL_PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$REEL_PG_DIR"
  mkdir -p "$REEL_PG_DIR"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$REEL_PG_DIR"
    # A checkout under a folder the postgres user cannot enter (root's home) keeps the server
    # in /tmp instead.
    if ! runuser -u postgres -- test -w "$REEL_PG_DIR"; then
      rm -rf "$REEL_PG_DIR"
      REEL_PG_DIR=$(mktemp -d -p /tmp reel-pg-test.XXXXXX)
      chown postgres "$REEL_PG_DIR"
    fi
  fi
  chmod 700 "$REEL_PG_DIR"
  REEL_PG_BIN="$bindir"
  reel_pg_as "$bindir/initdb" -D "$REEL_PG_DIR/data" -U postgres --auth=trust \
    --encoding=UTF8 --locale=C >"$REEL_PG_DIR/initdb.log" 2>&1 || {
    cat "$REEL_PG_DIR/initdb.log" >&2
    return 1
  }
  local port listen="''" tls=""
  port=$(reel_pg_free_port)
  if reel_pg_tls "$REEL_PG_DIR/data"; then
    listen=127.0.0.1
    tls="-c ssl=on"
  fi
  local fsync="-c fsync=off -c full_page_writes=off"
  if [ "${REEL_PG_FSYNC:-off}" = on ]; then
    fsync=""
  fi
  local statements=""
  if [ "${REEL_PG_STATEMENTS:-off}" = on ]; then
    statements="-c shared_preload_libraries=pg_stat_statements"
  fi
  reel_pg_as "$bindir/pg_ctl" -D "$REEL_PG_DIR/data" -l "$REEL_PG_DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=$listen -p $port -k $REEL_PG_DIR $fsync $tls $statements \
        -c max_connections=400 -c shared_buffers=64MB" start >/dev/null || {
    cat "$REEL_PG_DIR/server.log" >&2
    return 1
  }
  trap reel_pg_stop EXIT
  local socket
  socket=$(printf '%s' "$REEL_PG_DIR" | sed 's|/|%2F|g')
  # The socket's name carries the port, so the URL names it too.
  export REEL_TEST_POSTGRES_URL="postgres://postgres@${socket}:${port}/postgres"
  if [ -n "$tls" ]; then
    export REEL_TEST_POSTGRES_TLS_URL="postgres://postgres@localhost:${port}/postgres"
    export REEL_TEST_POSTGRES_CA="$REEL_PG_DIR/data/ca.crt"
    export REEL_TEST_POSTGRES_OTHER_CA="$REEL_PG_DIR/data/other-ca.crt"
  fi
  echo "postgres-for-tests: server in $REEL_PG_DIR (REEL_TEST_POSTGRES_URL is set${tls:+; TLS on localhost:$port})" >&2
}

# A loopback port nothing listens on (the kernel's choice), else one picked at random.
reel_pg_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    2>/dev/null || echo $((20000 + RANDOM % 20000))
}

# Makes a CA, a certificate for localhost it signs, and another CA, in the data directory `$1`
# (as the server's user: the key must be the server's, mode 0600), and lets the loopback port
# take TLS connections only. Fails, leaving TLS off, without openssl.
reel_pg_tls() {
  local data="$1"
  command -v openssl >/dev/null 2>&1 || {
    echo "postgres-for-tests: no openssl, so no TLS (REEL_TEST_POSTGRES_TLS_URL stays unset)" >&2
    return 1
  }
  reel_pg_as sh -c '
    set -e
    cd "$1"
    days=7
    openssl req -x509 -newkey rsa:2048 -nodes -days $days -subj "/CN=Reel test CA" \
      -keyout ca.key -out ca.crt
    openssl req -x509 -newkey rsa:2048 -nodes -days $days -subj "/CN=Reel other CA" \
      -keyout other-ca.key -out other-ca.crt
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
    printf "%s\n" "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
      "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days $days \
      -extfile server.ext -out server.crt
    chmod 600 server.key ca.key other-ca.key
    chmod 644 ca.crt other-ca.crt
    # The socket as before; the port with TLS only.
    printf "%s\n" "local all all trust" \
      "hostssl all all 127.0.0.1/32 trust" "hostssl all all ::1/128 trust" \
      "hostnossl all all 0.0.0.0/0 reject" "hostnossl all all ::/0 reject" >pg_hba.conf
  ' sh "$data" >"$data/../tls.log" 2>&1 || {
    cat "$data/../tls.log" >&2
    return 1
  }
}

reel_pg_as() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

reel_pg_stop() {
  if [ -n "${REEL_PG_DIR:-}" ] && [ -f "$REEL_PG_DIR/data/postmaster.pid" ]; then
    reel_pg_as "$REEL_PG_BIN/pg_ctl" -D "$REEL_PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  case "${REEL_PG_DIR:-}" in
    /tmp/reel-pg-test.*) rm -rf "$REEL_PG_DIR" ;;
  esac
}

reel_pg_start
