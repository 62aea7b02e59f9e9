#!/usr/bin/env bash
# `megaserve inspect` on broken copies of the demo model: each must exit 1
# with an error naming the problem (issue 14: a template that does not parse
# used to pass inspect with exit 0).  Usage: inspect_test.sh MEGASERVE_BIN SOURCE_DIR
set -uo pipefail
bin=$1
src=$2/models/north-mini-demo
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

# A copy of the demo model whose weights are a link (28 MB, never changed here).
fresh() {
  rm -rf "$work/m"
  mkdir "$work/m"
  for f in "$src"/*; do
    case $(basename "$f") in
      model.safetensors) ln -s "$f" "$work/m/model.safetensors" ;;
      *) cp "$f" "$work/m/" ;;
    esac
  done
}

# expect NAME EXIT_CODE REGEX: runs inspect on $work/m.
expect() {
  out=$("$bin" inspect --model "$work/m" 2>&1)
  rc=$?
  if [[ $rc -ne $2 ]] || ! grep -qE -- "$3" <<<"$out"; then
    echo "FAIL $1: exit $rc (want $2), output:"
    echo "$out" | tail -5
    fail=1
  else
    echo "ok   $1"
  fi
}

fresh
expect "demo model" 0 "chat template: .*chat_template.jinja parses; a one-message chat renders to [0-9]+ tokens"

fresh
printf '{%% for m in messages %%}{{ m.content }\n' > "$work/m/chat_template.jinja"
expect "template syntax error" 1 "chat_template.jinja: syntax error: .*line 1"

fresh
printf '{%% macro f(n) %%}{{ f(n + 1) }}{%% endmacro %%}{{ f(0) }}' > "$work/m/chat_template.jinja"
expect "recursive macro" 1 "chat_template.jinja: render error: template render limit: macro 'f'"

fresh
{ printf '{{ '; printf '(%.0s' $(seq 100000); printf '1'; printf ')%.0s' $(seq 100000); printf ' }}'; } > "$work/m/chat_template.jinja"
expect "100k nested parentheses" 1 "syntax error: template nested deeper than the limit of 100 levels"

fresh
printf '{%% for i in range(10**12) %%}x{%% endfor %%}' > "$work/m/chat_template.jinja"
expect "range(10**12)" 1 "items is over the limit"

fresh
printf '{{ "a" * 10**12 }}' > "$work/m/chat_template.jinja"
expect "'a' * 10**12" 1 "bytes is over the limit of 32 MiB"

fresh
printf '{%% for i in range(1000000) %%}{%% for j in range(1000000) %%}{%% endfor %%}{%% endfor %%}' > "$work/m/chat_template.jinja"
# The step limit, or under a sanitizer the 10 s clock, whichever comes first.
expect "nested loops" 1 "more than 20000000 steps|rendering took longer than 10.0 s"

fresh
printf '{{ undefined_function_call() }}' > "$work/m/chat_template.jinja"
expect "template needing request variables only warns" 0 "warning: a one-message chat does not render"

fresh
sed -i 's/"added_tokens": *\[/"added_tokens": [{"id": 4096, "content": "<|extra|>", "special": true, "normalized": false}, /' \
  "$work/m/tokenizer.json"
expect "tokenizer past the model's vocabulary" 1 \
  "tokenizer.json: added token id 4096 \\(\"<\\|extra\\|>\"\\) is outside the model's vocabulary of 4096 tokens"

exit $fail
