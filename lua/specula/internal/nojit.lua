-- specula.internal.nojit(fn): keep fn out of LuaJIT's compiler; returns fn.
--
-- Why, once for the whole tree: the LuaJIT 2.1 snapshot Debian 12 ships
-- (git 2022-03-20) can miscompile next()/pairs() loops so that a compiled
-- loop skips keys (LuaJIT issue #827, fixed upstream in April 2022); the
-- interpreter gets them right. Every pairs() walk whose result decides a
-- verdict, an output, a cache key or the arguments of a call is wrapped
-- here: json's key scan, the predictors' shapes and n-gram walk, the
-- verifiers' token overlap, the copy of predicted arguments.
local jit = rawget(_G, "jit")
return function(fn)
  if jit then jit.off(fn) end
  return fn
end
