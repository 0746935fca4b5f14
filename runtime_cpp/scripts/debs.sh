# debs.sh — sourced by the build scripts: ensure_debs WHO PACKAGE... installs the Debian packages that are
# missing. As root it runs `apt-get update` at most once a day (stamp $CACHE/.apt-updated) and installs
# them; otherwise it names them and returns 1. WHO prefixes the messages (the calling script's name).
# Needs CACHE set by the caller.
ensure_debs() {
  local who=$1 missing=() p
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "$who: please install the Debian packages (as root): apt-get install ${missing[*]}" >&2
    return 1
  fi
  echo "[$who] apt-get install ${missing[*]}" >&2
  if [ ! -e "$CACHE/.apt-updated" ] || [ -n "$(find "$CACHE/.apt-updated" -mmin +1440 2>/dev/null)" ]; then
    apt-get update >&2 && mkdir -p "$CACHE" && touch "$CACHE/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
}
