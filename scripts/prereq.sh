# Sourced by scripts/setup and scripts/cmake-checked: how to tell that a build prerequisite is present.

# libclang proper (bindgen loads it): libclang.so or libclang-N.so[.M] in the linker cache or a usual folder; not
# libclang-cpp, which some images ship alone. LIBCLANG_PATH, when set, is trusted as bindgen trusts it.
has_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  ldconfig -p 2>/dev/null | grep -E '^[[:space:]]*libclang(-[0-9.]+)?\.so' >/dev/null && return 0
  local d
  for d in /usr/lib/llvm-*/lib /usr/lib64 /usr/local/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu; do
    [ -d "$d" ] && ls "$d" 2>/dev/null | grep -E '^libclang(-[0-9.]+)?\.so' >/dev/null && return 0
  done
  return 1
}
