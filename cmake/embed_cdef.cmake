# Turns engine/sp_api.h into a C string the Lua side can ffi.cdef():
# preprocessor lines are dropped because the FFI parser does not take them.
file(READ "${IN}" content)
string(REGEX REPLACE "(^|\n)[ \t]*#[^\n]*" "\\1" content "${content}")
string(REPLACE "\\" "\\\\" content "${content}")
string(REPLACE "\"" "\\\"" content "${content}")
string(REPLACE "\n" "\\n\"\n  \"" content "${content}")
file(WRITE "${OUT}" "/* generated from sp_api.h: do not edit */\nconst char *sp_api_cdef(void);\nconst char *sp_api_cdef(void) {\n  return \"${content}\";\n}\n")
