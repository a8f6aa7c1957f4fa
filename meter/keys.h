/* meter: account and key identifiers, key secrets and their hashes.
 *
 * A key's bearer token is "<key_id>.<secret>": the key id (an id, which may
 * itself contain '.') finds the row, the secret proves possession. A secret
 * is KEYS_SECRET_BYTES bytes from getrandom(2), written in base64url without
 * padding (43 characters, never a '.'), so a token is split at its LAST '.'.
 * Only SHA-256 of the secret's text (OpenSSL EVP) is stored; hashes are
 * compared with CRYPTO_memcmp. Secrets must never be logged. */
#ifndef METER_KEYS_H
#define METER_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "parse.h"
#include "rc.h"

#define KEYS_SECRET_BYTES 32
#define KEYS_SECRET_LEN	  43  /* base64url of 32 bytes, no padding */
#define KEYS_SECRET_MAX	  256 /* longest secret text accepted when parsing */
#define KEYS_HASH_LEN	  32  /* SHA-256 */
#define KEYS_GEN_ID_LEN	  20  /* "key_" or "acc_" + 16 hex digits */
#define KEYS_TOKEN_MAX	  (PARSE_ID_MAX + 1 + KEYS_SECRET_MAX) /* without the NUL */

/* A new key id "key_" + 16 random lower-case hex digits into out (at least
 * KEYS_GEN_ID_LEN + 1 bytes). METER_EIO when getrandom fails. */
METER_MUSTCHECK enum meter_rc keys_new_key_id(char *out, size_t outlen);

/* A new account id "acc_" + 16 random hex digits, as keys_new_key_id. */
METER_MUSTCHECK enum meter_rc keys_new_account_id(char *out, size_t outlen);

/* A new secret: KEYS_SECRET_BYTES random bytes as base64url without padding
 * into out (at least KEYS_SECRET_LEN + 1 bytes). METER_EIO when getrandom
 * fails, METER_EINVAL when out is too small. */
METER_MUSTCHECK enum meter_rc keys_new_secret(char *out, size_t outlen);

/* base64url (RFC 4648 §5) of n bytes without padding into out; METER_EINVAL
 * when out (outlen bytes, NUL included) is too small. */
METER_MUSTCHECK enum meter_rc keys_base64url(const unsigned char *in, size_t n, char *out,
					     size_t outlen);

/* SHA-256 of data's len bytes into out. METER_EIO when OpenSSL fails. */
METER_MUSTCHECK enum meter_rc keys_sha256(const void *data, size_t len,
					  unsigned char out[KEYS_HASH_LEN]);

/* The n bytes of in as 2n lower-case hex digits and a NUL into out. */
void keys_hex(const unsigned char *in, size_t n, char *out);

/* SHA-256 of the secret's len bytes into hash. METER_ENOMEM / METER_EIO
 * when OpenSSL fails. */
METER_MUSTCHECK enum meter_rc keys_hash_secret(const char *secret, size_t len,
					       unsigned char hash[KEYS_HASH_LEN]);

/* Constant-time equality of two hashes. */
bool keys_hash_equal(const unsigned char a[KEYS_HASH_LEN], const unsigned char b[KEYS_HASH_LEN]);

/* Writes "<key_id>.<secret>" into out. METER_EINVAL when it does not fit or
 * key_id is not an id. */
METER_MUSTCHECK enum meter_rc keys_token_format(const char *key_id, const char *secret, char *out,
						size_t outlen);

/* Splits token at its last '.': key_id gets the id (PARSE_ID_MAX + 1
 * bytes), *secret points into token (borrowed) at the secret. METER_EINVAL
 * when there is no '.', the id part is not an id, or the secret is empty,
 * longer than KEYS_SECRET_MAX or holds anything but base64url characters. */
METER_MUSTCHECK enum meter_rc keys_token_split(const char *token, char *key_id,
					       const char **secret);

#define KEYS_TZ_MAX 64 /* bytes of a time zone name */

/* Checks a time zone name's shape: 1..KEYS_TZ_MAX characters of A-Z a-z
 * 0-9 / _ + -. Whether it names a zone is for the database to say. */
bool keys_tz_shape_ok(const char *tz);

#endif
