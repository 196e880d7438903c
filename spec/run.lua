-- spec/run.lua — runs busted inside LuaJIT with specula's module paths
-- (`luajit spec/run.lua spec/unit`). Used by CTest; any busted options work.
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
-- the node the specs start MCP servers with: $SPECULA_NODE's directory or
-- the Node 22 that .ci/deps installs, first on PATH (spec/support/deps.lua)
require("support.deps").use_node()
require("busted.runner")({ standalone = false })
