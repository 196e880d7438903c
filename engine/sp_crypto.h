/* sp_crypto: SHA-256, HMAC, random bytes, JWS signatures (RS256, ES256),
 * hex and Base64 from OpenSSL's libcrypto; no primitive is written here. The declarations
 * Lua uses are in sp_api.h. */
#ifndef SP_CRYPTO_H
#define SP_CRYPTO_H
#include <stdlib.h>

#include "sp_api.h"

#endif
