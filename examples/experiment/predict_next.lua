-- examples/experiment/predict_next.lua — an action predictor: while the
-- model is still deciding, guess its next call from the last observation.
-- A note that names the next one ("next: case2_2.txt") is usually followed
-- by reading it; the last note ("end of notes") by the write, whose
-- arguments cannot be guessed, so nothing is predicted then.
return function(history)
  local last = history[#history]
  if not last or last.tool ~= "read_text_file" then return {} end
  local next_note = tostring(last.observation):match("\nnext: (%S+)")
  if not next_note then return {} end
  return { { tool = "read_text_file", args = { path = next_note }, confidence = 0.9 } }
end
