# Debian's archive, as this machine's apt knows it: one place for the scripts
# that fetch source packages (scripts/pythons.sh: CPython; scripts/wheel.sh:
# every C library a wheel carries) or install build tools. Sourced, not run:
#
#   . "$ROOT/scripts/debian.sh"
#   deb_need nasm debootstrap           # install what is missing (apt, sudo when not root)
#   deb_mirror                          # the mirror apt uses, e.g. http://<host>/debian
#   deb_source DIR bookworm zstd curl   # the source packages, downloaded into DIR
#
# No host name is written here: the mirror is the one in /etc/apt/sources.list
# or /etc/apt/sources.list.d/ (a 'deb' line or a deb822 'URIs:' line ending in
# /debian). apt checks the archive's signature (the keyring of the machine)
# and each file's checksum, as for any package it installs.

deb_log() { echo "debian: $*" >&2; }

# Install the Debian packages named that are not installed yet.
deb_need() {
  local missing=() p sudo=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  deb_log "installing ${missing[*]}"
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# The Debian mirror of apt's configuration (first match), or an error that
# says what to add.
deb_mirror() {
  local m
  m=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list.d/*.list /etc/apt/sources.list 2>/dev/null |
      awk '{print $2}' | grep -E '/debian/?$' | head -1 || true)
  if [ -z "$m" ]; then
    deb_log "no Debian mirror in /etc/apt/sources.list{,.d}: add one (a 'deb' or 'URIs:' line ending in /debian)"
    return 1
  fi
  echo "${m%/}"
}

# deb_source DIR SUITE PKG...: `apt-get source --download-only` of each
# source package of SUITE (main; for a stable suite also its -updates: a
# point release carries the security fixes of its time) into DIR, with
# package lists of its own under DIR/.apt (the machine's apt state is not
# touched). Leaves PKG_VERSION.orig.tar.* / .debian.tar.* / .dsc in DIR.
deb_source() {
  local dir=$1 suite=$2
  shift 2
  local mirror
  mirror=$(deb_mirror) || return 1
  mkdir -p "$dir/.apt/lists/partial"
  {
    echo "deb-src $mirror $suite main"
    case "$suite" in
      sid|unstable|experimental) ;;
      *) echo "deb-src $mirror $suite-updates main" ;;
    esac
  } > "$dir/.apt/sources.list"
  local apt=(-o "Dir::Etc::SourceList=$dir/.apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$dir/.apt/lists" -o APT::Sandbox::User=root)
  deb_log "source packages of $suite from $mirror: $*"
  apt-get "${apt[@]}" update -q >/dev/null || { deb_log "apt-get update of $suite's sources failed"; return 1; }
  (cd "$dir" && apt-get "${apt[@]}" source -q --download-only "$@" >/dev/null) ||
    { deb_log "apt-get source $* ($suite) failed"; return 1; }
}
