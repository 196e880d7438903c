/* sp_jsonenc: JSON text of a Lua value, walked in C with the Lua API.
 *
 * The same text as lua/specula/json.lua's encode() and canonical() (the
 * array/object rule at the top of that file; numbers and strings as in
 * sp_json.h), produced without building a Lua string per piece: the table
 * walk (lua_next, raw reads, no metamethods) and the key sort run in C and
 * the text grows in one buffer that is reused from call to call.
 *
 * Lua sees it as a module: package.preload["specula.jsonenc"] in the specula
 * binary (sp_host.c), package.loadlib(libspecula_core.so,
 * "luaopen_specula_jsonenc") under plain luajit. The module is a function
 * new(array_mt, object_mt, null [, raw_mt]) returning enc and enc_buf. enc(value, sorted): the
 * text (a table under raw_mt is { text } and its text is copied verbatim),
 * keys sorted bytewise when sorted is true, or nil and "JSON: <why>" with
 * the message json.lua gives for the same value. enc(value, sorted, file)
 * writes the text and a newline to an io library file handle instead and
 * flushes it: true and the bytes written, nil and the reason when the value cannot be encoded
 * (nothing written), or false and the OS error when a write or the flush
 * failed. enc(value, true, file, true) also returns, third, the text
 * "[" .. answer .. "," .. trajectory .. "]" cut from the line (the values
 * of the top-level object's "answer" and "trajectory" keys: what
 * json.canonical({ answer, trajectory }) gives), or nil when either is
 * absent. enc_buf(value, sorted) leaves the text in the encoder's buffer
 * and returns the encoder's state (its userdata) and the text's length (nil
 * and "JSON: <why>" as enc); sp_jsonenc_text(state) is the text, valid
 * until either closure's next call, for a caller that copies it into C at
 * once. Neither runs Lua code nor yields. */
#ifndef SP_JSONENC_H
#define SP_JSONENC_H
#include <lua.h>
#include <stdio.h>

int luaopen_specula_jsonenc(lua_State *L);
/* The text of the last call of the encoder whose state this is (an FFI
   call passes enc_buf's userdata as its address); NULL for anything else. */
const char *sp_jsonenc_text(const void *state);
/* Write data[0, len) (whole lines) to f: a batched file (sp_outfile.h)
   keeps it in its buffer, flushed first when the line does not fit in what
   is left; any other is flushed at once. 0, or errno (-1 without one). The
   one line writer of the encoder and of sp_outfile_write. */
int sp_jsonenc_write_line_to(FILE *f, const char *data, size_t len, int batched);

#endif
