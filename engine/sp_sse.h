/* sp_sse: incremental Server-Sent Events parser (WHATWG "event stream" rules).
 * Feed it arbitrary chunks of the response body; it queues complete events.
 *
 * Lua drives it through the FFI, so its whole API (sp_sse_event, sp_sse_new,
 * _feed, _next, _finish, _error, _free) is declared once, in sp_api.h; this
 * header is what C callers include. */
#ifndef SP_SSE_H
#define SP_SSE_H
#include "sp_api.h"

#endif
