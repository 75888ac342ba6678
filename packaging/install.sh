#!/bin/sh
# Install compute-domain-agent as a systemd service on a host-managed node, without network.
#
#   install.sh install   [--root DIR] [--prefix DIR] [--from DIR]
#   install.sh uninstall [--root DIR] [--prefix DIR]
#   install.sh bundle    DIR    # gather the four files to carry to an air-gapped host
#
#   --root DIR    install into DIR as if it were / (images, tests); default /
#   --prefix DIR  where bin/compute-domain-agent goes; default /usr/local
#   --from DIR    where the files come from: a bundle directory (the four files side by side)
#                 or this repository (dist/ and systemd/); default: next to this script
#
# Installs (paths under --root):
#   PREFIX/bin/compute-domain-agent
#   /etc/systemd/system/compute-domain-agent.service
#   /etc/compute-domain-agent/compute-domain-agent.env   (kept when you have changed it)
#   PREFIX/share/compute-domain-agent/compute-domain-agent.env.default  (what was shipped)
# Running it again is harmless. `systemctl daemon-reload` runs only for --root / on a host
# booted with systemd.
set -eu

NAME=compute-domain-agent
UNIT=$NAME.service
ENVFILE=$NAME.env
DEFAULT_PREFIX=/usr/local

die() {
    echo "install.sh: error: $*" >&2
    exit 1
}

usage() {
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

note() {
    echo "install.sh: $*"
}

script_dir() {
    CDPATH='' cd -- "$(dirname -- "$0")" && pwd
}

# find_source FILE: the path of FILE in the --from directory (bundle or repository layout).
find_source() {
    for candidate in "$FROM/$1" "$FROM/dist/$1" "$FROM/systemd/$1"; do
        if [ -f "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# copy_file SRC DEST MODE: replace DEST atomically (a running binary is not overwritten in place).
copy_file() {
    mkdir -p "$(dirname -- "$2")"
    tmp="$2.tmp.$$"
    cp -- "$1" "$tmp"
    chmod "$3" "$tmp"
    mv -f -- "$tmp" "$2"
}

real_root() {
    [ "$ROOT" = "/" ]
}

daemon_reload() {
    if real_root && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl daemon-reload
        note "ran systemctl daemon-reload"
    fi
}

# remove_empty_dir DIR: remove DIR if it exists and is empty.
remove_empty_dir() {
    if [ -d "$1" ]; then
        rmdir -- "$1" 2>/dev/null || true
    fi
}

paths() {
    BIN_DEST="$ROOT_PREFIX$PREFIX/bin/$NAME"
    UNIT_DEST="$ROOT_PREFIX/etc/systemd/system/$UNIT"
    CONF_DIR="$ROOT_PREFIX/etc/$NAME"
    ENV_DEST="$CONF_DIR/$ENVFILE"
    SHARE_DIR="$ROOT_PREFIX$PREFIX/share/$NAME"
    ENV_SHIPPED="$SHARE_DIR/$ENVFILE.default"
}

do_install() {
    [ -d "$FROM" ] || die "--from $FROM is not a directory"
    bin_src=$(find_source "$NAME") ||
        die "no $NAME binary in $FROM (or $FROM/dist): build it with 'make binary', or pass --from DIR"
    [ -x "$bin_src" ] || die "$bin_src is not executable"
    unit_src=$(find_source "$UNIT") || die "no $UNIT in $FROM (or $FROM/systemd)"
    env_src=$(find_source "$ENVFILE") || die "no $ENVFILE in $FROM (or $FROM/systemd)"
    paths

    copy_file "$bin_src" "$BIN_DEST" 0755
    note "installed $BIN_DEST"

    mkdir -p "$(dirname -- "$UNIT_DEST")"
    tmp="$UNIT_DEST.tmp.$$"
    sed "s|$DEFAULT_PREFIX/bin/$NAME|$PREFIX/bin/$NAME|g" "$unit_src" >"$tmp"
    chmod 0644 "$tmp"
    mv -f -- "$tmp" "$UNIT_DEST"
    note "installed $UNIT_DEST"

    # The environment file is the admin's: replace it only while it is what we shipped last.
    if [ -f "$ENV_DEST" ] && ! { [ -f "$ENV_SHIPPED" ] && cmp -s "$ENV_DEST" "$ENV_SHIPPED"; } &&
        ! cmp -s "$ENV_DEST" "$env_src"; then
        note "kept your modified $ENV_DEST (the shipped defaults are in $ENV_SHIPPED)"
    else
        copy_file "$env_src" "$ENV_DEST" 0644
        note "installed $ENV_DEST"
    fi
    copy_file "$env_src" "$ENV_SHIPPED" 0644

    daemon_reload
    if real_root; then
        note "next: put a kubeconfig in $CONF_DIR/kubeconfig, review $ENV_DEST, then"
        note "  systemctl enable --now $UNIT   (or: systemctl restart $UNIT after an upgrade)"
    fi
}

do_uninstall() {
    paths
    if real_root && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        if systemctl is-active --quiet "$UNIT" || systemctl is-enabled --quiet "$UNIT"; then
            # KillMode=process leaves the agent's nvidia-imex children running on a stop
            # (for the next agent to adopt); an uninstall ends them too.
            systemctl kill --kill-whom=all "$UNIT" 2>/dev/null || true
            systemctl disable --now "$UNIT" || true
        fi
    fi
    for f in "$BIN_DEST" "$UNIT_DEST"; do
        if [ -e "$f" ]; then
            rm -f -- "$f"
            note "removed $f"
        fi
    done
    if [ -f "$ENV_DEST" ]; then
        if [ -f "$ENV_SHIPPED" ] && cmp -s "$ENV_DEST" "$ENV_SHIPPED"; then
            rm -f -- "$ENV_DEST"
            note "removed $ENV_DEST"
        else
            note "kept $ENV_DEST: it has your changes (delete it yourself if unwanted)"
        fi
    fi
    rm -f -- "$ENV_SHIPPED"
    remove_empty_dir "$SHARE_DIR"
    remove_empty_dir "$CONF_DIR"
    daemon_reload
}

do_bundle() {
    out=$1
    [ -d "$FROM" ] || die "--from $FROM is not a directory"
    mkdir -p "$out"
    for f in "$NAME" "$UNIT" "$ENVFILE"; do
        src=$(find_source "$f") || die "no $f in $FROM: build the binary with 'make binary' first"
        cp -- "$src" "$out/$f"
    done
    chmod 0755 "$out/$NAME"
    here=$(script_dir)
    cp -- "$here/install.sh" "$out/install.sh"
    chmod 0755 "$out/install.sh"
    note "bundle in $out: copy it to the host and run: sudo ./install.sh install"
}

[ $# -ge 1 ] || usage
COMMAND=$1
shift
ROOT=/
PREFIX=$DEFAULT_PREFIX
FROM=$(script_dir)
# The repository layout: this script lives in packaging/, the binary in dist/, the unit in
# systemd/.
if [ ! -f "$FROM/$NAME" ] && [ -f "$FROM/../systemd/$UNIT" ]; then
    FROM=$(CDPATH='' cd -- "$FROM/.." && pwd)
fi
BUNDLE_DIR=
while [ $# -gt 0 ]; do
    case $1 in
        --root) [ $# -ge 2 ] || usage; ROOT=$2; shift 2 ;;
        --root=*) ROOT=${1#*=}; shift ;;
        --prefix) [ $# -ge 2 ] || usage; PREFIX=$2; shift 2 ;;
        --prefix=*) PREFIX=${1#*=}; shift ;;
        --from) [ $# -ge 2 ] || usage; FROM=$2; shift 2 ;;
        --from=*) FROM=${1#*=}; shift ;;
        -h | --help) usage ;;
        -*) echo "install.sh: unknown option $1" >&2; usage ;;
        *)
            if [ "$COMMAND" != bundle ] || [ -n "$BUNDLE_DIR" ]; then
                usage
            fi
            BUNDLE_DIR=$1
            shift
            ;;
    esac
done
case $PREFIX in
    /*) ;;
    *) die "--prefix must be an absolute path, not $PREFIX" ;;
esac
[ -n "$ROOT" ] || ROOT=/
# Under --root, every path gets this in front; for / nothing (no double slashes).
ROOT_PREFIX=${ROOT%/}

case $COMMAND in
    install) do_install ;;
    uninstall) do_uninstall ;;
    bundle) [ -n "$BUNDLE_DIR" ] || usage; do_bundle "$BUNDLE_DIR" ;;
    -h | --help | help) usage ;;
    *) echo "install.sh: unknown command $COMMAND" >&2; usage ;;
esac
