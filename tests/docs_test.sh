#!/bin/sh
# Checks README.md and the guides, doc/*.md, with TAP output:
#   1  README.md stays a front door: at most 300 lines (issue 35), the
#      rest in a guide per subject;
#   2  every relative link names a file that exists;
#   3  every link to a heading (#anchor, in the same file or in another
#      Markdown file) names one, as GitHub makes a heading's anchor;
#   4  every code block that claims to run is run: a fenced block whose
#      info string is "c run=NAME" is compiled and run by
#      tests/example_test.sh, one of "python run=NAME" by
#      tests/python/test_readme.py, each runner naming NAME; no NAME twice;
#   5  every fenced C block that defines main() is so marked: a fenced
#      block without the mark is a fragment, and reads as one.
# The convention, for whoever writes a guide: a block that the text says
# runs carries run=NAME after its language (GitHub shows only the
# language), and its runner looks it up by NAME; shell sessions are
# indented blocks, transcripts of a run, which nothing runs.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
. "$top_srcdir/tests/tap.sh"
scratch_dir
echo "1..5"

cd "$top_srcdir" || exit 1
docs="README.md $(ls doc/*.md)"

lines=$(wc -l <README.md)
if [ "$lines" -le 300 ]; then
  ok "README.md has at most 300 lines ($lines)"
else
  not_ok "README.md has at most 300 lines ($lines)"
  diag "move what a first reader does not need into a guide under doc/"
fi

# Outside fenced and indented code: FILE TARGET for each link, and FILE
# ANCHOR for each heading (GitHub's anchor: lower case, punctuation but
# - and _ dropped, spaces made -, a repeated one suffixed -1, -2, ...).
# shellcheck disable=SC2086 # $docs is a list of words
awk -v links="$tmp/links" -v anchors="$tmp/anchors" '
  FNR == 1 { fence = 0; delete seen }
  /^```/ { fence = !fence; next }
  fence || /^    / { next }
  /^#+ / {
    a = tolower($0)
    sub(/^#+ /, "", a)
    gsub(/[^a-z0-9 _-]/, "", a)
    gsub(/ /, "-", a)
    s = a
    if (a in seen) s = a "-" seen[a]
    seen[a]++
    print FILENAME "\t" s > anchors
  }
  {
    line = $0
    while (match(line, /\]\([^) ]*\)/)) {
      print FILENAME "\t" substr(line, RSTART + 2, RLENGTH - 3) > links
      line = substr(line, RSTART + RLENGTH)
    }
  }
' $docs
touch "$tmp/links" "$tmp/anchors"

: >"$tmp/badfile"
: >"$tmp/badanchor"
while IFS="$(printf '\t')" read -r file target; do
  case $target in
  http://* | https://* | mailto:*) continue ;;
  esac
  path=${target%%#*}
  anchor=
  case $target in *'#'*) anchor=${target#*#} ;; esac
  if [ -z "$path" ]; then
    dest=$file
  else
    dest=$(dirname "$file")/$path
    dest=${dest#./}
    if [ ! -e "$dest" ]; then
      echo "$file: $target" >>"$tmp/badfile"
      continue
    fi
  fi
  [ -n "$anchor" ] || continue
  # Normalise doc/../README.md to README.md, as awk's FILENAME has it.
  dest=$(cd "$(dirname "$dest")" && pwd)/$(basename "$dest")
  dest=${dest#"$(pwd)/"}
  case $dest in
  *.md) grep -qxF "$dest	$anchor" "$tmp/anchors" ||
    echo "$file: $target" >>"$tmp/badanchor" ;;
  *) echo "$file: $target (an anchor in a file that is not Markdown)" \
    >>"$tmp/badanchor" ;;
  esac
done <"$tmp/links"

nlinks=$(wc -l <"$tmp/links")
if [ ! -s "$tmp/badfile" ]; then
  ok "every relative link of README.md and doc/*.md names a file ($nlinks links)"
else
  not_ok "every relative link of README.md and doc/*.md names a file"
  diag "links to nothing:" "$(cat "$tmp/badfile")"
fi
if [ ! -s "$tmp/badanchor" ]; then
  ok "every link to a heading names one"
else
  not_ok "every link to a heading names one"
  diag "anchors no heading makes:" "$(cat "$tmp/badanchor")"
fi

# LANG NAME FILE for each marked block, and FILE for each unmarked C
# block with a main().
# shellcheck disable=SC2086
awk -v marked="$tmp/marked" -v mains="$tmp/mains" '
  FNR == 1 { fence = 0 }
  /^```/ && !fence {
    fence = 1; lang = $1; sub(/^```/, "", lang); name = ""
    if ($2 ~ /^run=/) { name = substr($2, 5); print lang, name, FILENAME > marked }
    next
  }
  /^```$/ && fence { fence = 0; next }
  fence && lang == "c" && name == "" && /^(int|main)/ && /main\(/ {
    print FILENAME ": " $0 > mains
  }
' $docs
touch "$tmp/marked" "$tmp/mains"

: >"$tmp/unrun"
while read -r lang name file; do
  case $lang in
  c) runner=tests/example_test.sh ;;
  python) runner=tests/python/test_readme.py ;;
  *) runner= ;;
  esac
  if [ -z "$runner" ]; then
    echo "$file: $lang run=$name: no test runs $lang blocks" >>"$tmp/unrun"
  elif ! grep -q "[\"' ]$name[\"' ]" "$runner"; then
    echo "$file: $lang run=$name: $runner does not name $name" >>"$tmp/unrun"
  fi
done <"$tmp/marked"
awk '{ print $2 }' "$tmp/marked" | sort | uniq -d |
  sed 's/^/marked twice: run=/' >>"$tmp/unrun"
nmarked=$(wc -l <"$tmp/marked")
if [ "$nmarked" -gt 0 ] && [ ! -s "$tmp/unrun" ]; then
  ok "every block marked run=NAME is run by its language's test ($nmarked blocks)"
else
  not_ok "every block marked run=NAME is run by its language's test"
  diag "$(cat "$tmp/unrun")" "$nmarked marked blocks"
fi

if [ ! -s "$tmp/mains" ]; then
  ok "every C program (a block with main) is marked run=NAME"
else
  not_ok "every C program (a block with main) is marked run=NAME"
  diag "unmarked programs:" "$(cat "$tmp/mains")"
fi

exit $failed
