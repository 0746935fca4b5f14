#!/usr/bin/env bash
# wine_run.sh — run a Windows .exe under wine, non-interactively; the test wrapper of the mingw build
# (-DGSURG_TEST_WRAPPER=<repo>/runtime_cpp/scripts/wine_run.sh).
#
# Usage: wine_run.sh PROGRAM.exe [ARGS...]   (exit status and stdout/stderr are the program's)
#
# Contract:
#   - WINEPREFIX defaults to ${GSURG_CACHE:-$HOME/.cache/gsurg}/wineprefix (created on first use, under a
#     lock so parallel tests do not race); WINEDEBUG=-all; mono/gecko are never offered
#     (WINEDLLOVERRIDES="mscoree,mshtml="); no display is needed (DISPLAY is cleared).
#   - uses `wine` (Debian's wrapper, which runs wine64 when wine32 is absent), else /usr/lib/wine/wine64.
#   - the wine server and its services are started detached from the caller's pipes and linger 10 s, so a
#     run costs ~0.3 s once warm and the caller's pipe closes when the program exits.
#   - LANG defaults to C.UTF-8 so wine converts UTF-8 arguments and paths to UTF-16 correctly.
set -euo pipefail
{  # the whole script is parsed before it runs: editing the file meanwhile cannot derail a running build


if [ $# -lt 1 ]; then
  echo "usage: wine_run.sh PROGRAM.exe [ARGS...]" >&2
  exit 2
fi

CACHE=${GSURG_CACHE:-$HOME/.cache/gsurg}
export WINEPREFIX=${WINEPREFIX:-$CACHE/wineprefix}
export WINEDEBUG=${WINEDEBUG:--all}
export WINEDLLOVERRIDES=${WINEDLLOVERRIDES:-mscoree,mshtml=}
export WINEARCH=win64
export LANG=${LANG:-C.UTF-8}
case "$LANG" in *UTF-8*|*utf8*|*UTF8*|*utf-8*) ;; *) export LANG=C.UTF-8 ;; esac
unset DISPLAY WAYLAND_DISPLAY

if command -v wine >/dev/null; then
  WINE=wine
elif command -v wine64 >/dev/null; then
  WINE=wine64
elif [ -x /usr/lib/wine/wine64 ]; then
  WINE=/usr/lib/wine/wine64
else
  echo "wine_run.sh: wine is not installed (Debian: apt-get install wine wine64)" >&2
  exit 127
fi

# First use: create the prefix once (wineboot), serialised with a lock.
if [ ! -f "$WINEPREFIX/.pvl-ready" ]; then
  mkdir -p "$(dirname "$WINEPREFIX")"
  exec 8>"$WINEPREFIX.lock"
  flock 8
  if [ ! -f "$WINEPREFIX/.pvl-ready" ]; then
    "$WINE" wineboot --init >/dev/null 2>&1 || true
    wineserver -w 2>/dev/null || true
    if [ ! -d "$WINEPREFIX/drive_c" ]; then
      echo "wine_run.sh: could not create the wine prefix $WINEPREFIX" >&2
      exit 1
    fi
    touch "$WINEPREFIX/.pvl-ready"
  fi
  flock -u 8
  exec 8>&-
fi

# Start the server and wine's own services with no inherited stdout/stderr: otherwise they keep the
# caller's pipe open until the server exits (ctest then waits ~3 s, or the whole persistence time).
WINESERVER=${WINESERVER:-wineserver}
"$WINESERVER" -p10 </dev/null >/dev/null 2>&1 || true
"$WINE" cmd /c exit </dev/null >/dev/null 2>&1 || true

exec "$WINE" "$@"

exit 0
}
