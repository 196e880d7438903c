-- spec/run.lua — runs busted inside LuaJIT with specula's module paths
-- (`luajit spec/run.lua spec/unit`). Used by CTest; any busted options work.
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
require("busted.runner")({ standalone = false })
