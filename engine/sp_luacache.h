/* sp_luacache: specula's own Lua modules loaded from a cache of their
 * compiled bytecode instead of parsed at every start (docs/cli.md, the
 * environment). An entry is used only for the exact source text it was
 * compiled from (a SHA-256 of it, the chunk name and the LuaJIT version);
 * any problem with the cache (none, unwritable, damaged, a foreign owner)
 * means the module is parsed as before, never an error. */
#ifndef SP_LUACACHE_H
#define SP_LUACACHE_H
#include <lua.h>

/* Extends package.loaders[2], the Lua file searcher (in place, so a
   wrapper of loaders[2] still sees every Lua module loaded): a module
   that package.path finds under lua_dir (the engine's tree) is loaded
   through the cache; any other, as before.
   The cache directory: $SPECULA_BYTECODE_CACHE ("off": none), else
   $XDG_CACHE_HOME/specula/lua-bytecode, else ~/.cache/specula/lua-bytecode;
   made (0700) if missing, and used only if it is a directory of this user
   that nobody else may write. 0, or -1 (out of memory: nothing installed). */
int sp_luacache_install(lua_State *L, const char *lua_dir);

#endif
