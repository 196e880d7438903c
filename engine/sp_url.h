/* sp_url: percent-encoding and URL parsing from libcurl's URL API; no
 * codec is written here. The declarations Lua uses are in sp_api.h. */
#ifndef SP_URL_H
#define SP_URL_H
#include <stddef.h>

#include "sp_api.h"

#endif
