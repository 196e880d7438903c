-- examples/offline_world.lua — the tiny fictional world the multi-hop
-- examples (multihop_qa.lua, tsss.lua) answer from when they run offline:
-- films, directors, birth years and places, a search corpus built from the
-- facts, and the plan of hops a question needs. Each example keeps its own
-- fake model (they read different prompt formats); what they share is here.
-- The examples load it with `require "offline_world"`: `specula run` puts the
-- agent script's own directory on package.path.
local specula = require "specula"
local text = specula.text

local pairs, ipairs, sort, concat, min = pairs, ipairs, table.sort, table.concat, math.min

local W = {}

W.NO_INFO = "No relevant information found"

W.FACTS = {  -- relation -> subject -> object
  director = { ["The Glass Orchard"] = "Maren Holt", ["Harbor of Ash"] = "Ilya Corwen",
               ["Seven Quiet Winters"] = "Tomas Ferreira" },
  year = { ["Maren Holt"] = "1931", ["Ilya Corwen"] = "1924", ["Tomas Ferreira"] = "1940" },
  place = { ["Maren Holt"] = "Tarnby", ["Ilya Corwen"] = "Velmora", ["Tomas Ferreira"] = "Saldo Vale" },
  country = { Tarnby = "Estria", Velmora = "Norland", ["Saldo Vale"] = "Portavia" },
}
local FACTS = W.FACTS

-- How a sub-question about each relation is asked, and parsed back.
W.ASK = { director = "Who directed %s?", year = "When was %s born?",
          place = "Where was %s born?", country = "Which country is %s in?" }
local PARSE = { director = "^Who directed (.+)%?$", year = "^When was (.+) born%?$",
                place = "^Where was (.+) born%?$", country = "^Which country is (.+) in%?$" }
local SAY = { director = "%s is a drama film directed by %s.", year = "%s was born in %s.",
              place = "%s was born in the town of %s.", country = "%s is a town in %s." }

-- The search corpus: one passage per fact, in a fixed order.
local CORPUS = {}
for _, rel in ipairs({ "director", "year", "place", "country" }) do
  local subjects = {}
  for s in pairs(FACTS[rel]) do subjects[#subjects + 1] = s end
  sort(subjects)
  for _, s in ipairs(subjects) do CORPUS[#CORPUS + 1] = SAY[rel]:format(s, FACTS[rel][s]) end
end

-- "Who directed X?" -> "director", "X" (nil for anything else).
function W.parse(q)
  for rel, pat in pairs(PARSE) do
    local subject = q:match(pat)
    if subject then return rel, subject end
  end
end

-- The true answer to a sub-question, or nil.
function W.truth(q)
  local rel, subject = W.parse(q)
  return rel and FACTS[rel][subject], rel, subject
end

-- The hops a question needs and how to conclude from their answers:
-- hops[i] = { relation, subject, from } where `from` is the earlier hop whose
-- answer is this hop's subject (nil for the first hop of a chain);
-- conclude(answers) -> the final answer. nil for a question about no known film.
function W.plan(question)
  local films, lq = {}, question:lower()
  for title in pairs(FACTS.director) do
    local at = lq:find(title:lower(), 1, true)
    if at then films[#films + 1] = { at, title } end
  end
  sort(films, function(a, b) return a[1] < b[1] end)
  local hops = {}
  local function chain(film, rels)
    local subject = film
    for i, rel in ipairs(rels) do
      hops[#hops + 1] = { rel, subject, i > 1 and #hops or nil }
      subject = FACTS[rel][subject]
    end
  end
  if #films >= 2 then
    chain(films[1][2], { "director", "year" })
    chain(films[2][2], { "director", "year" })
    return hops, function(ans) return tonumber(ans[2]) <= tonumber(ans[4]) and films[1][2] or films[2][2] end
  elseif #films == 1 then
    local rels = { "director" }
    if lq:find("country") then rels = { "director", "place", "country" }
    elseif lq:find("where") then rels = { "director", "place" }
    elseif lq:find("when") or lq:find("year") then rels = { "director", "year" } end
    chain(films[1][2], rels)
    return hops, function(ans) return ans[#ans] end
  end
end

-- The n passages that share the most content words with q (ties: corpus
-- order), or nil when none shares any.
function W.search(q, n)
  local want = text.set(text.content_tokens(q))
  local scored = {}
  for i, passage in ipairs(CORPUS) do
    local score = 0
    for _, w in ipairs(text.content_tokens(passage)) do if want[w] then score = score + 1 end end
    if score > 0 then scored[#scored + 1] = { score, i, passage } end
  end
  if #scored == 0 then return nil end
  sort(scored, function(a, b) if a[1] ~= b[1] then return a[1] > b[1] end return a[2] < b[2] end)
  local out = {}
  for i = 1, min(n, #scored) do out[i] = scored[i][3] end
  return out
end

-- Offline with --set offline=1, online with --set offline=0, else offline
-- when no OPENAI_BASE_URL is set.
function W.offline(ctx)
  local flag = ctx.set.offline
  if flag == nil then return (os.getenv("OPENAI_BASE_URL") or "") == "" end
  return flag ~= 0 and flag ~= false and flag ~= "0"
end

-- The backend for ctx: `offline` as given, `online()` built once, on first use.
function W.backend_chooser(offline, online)
  local built
  return function(ctx)
    if W.offline(ctx) then return offline end
    built = built or online()
    return built
  end
end

-- Search results of an HTTP tool -> up to n passages cut to 600 bytes, each
-- through fmt(i, passage); NO_INFO for an empty list, the first 2,000 bytes
-- of the body when it holds no passages at all.
function W.passages(res, n, fmt)
  local list = specula.tools.passages(res.body, n)
  if not list then return res.body:sub(1, 2000) end
  if #list == 0 then return W.NO_INFO end
  for i = 1, #list do list[i] = fmt(i, list[i]:sub(1, 600)) end
  return concat(list, "\n")
end

return W
