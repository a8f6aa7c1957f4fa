/* meter API: signed session cookies (see session.h). */
#include "session.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "http.h"
#include "keys.h"
#include "parse.h"

static unsigned char session_secret[SESSION_SECRET_LEN];

enum meter_rc session_init(const char *configured)
{
	_Static_assert(SESSION_SECRET_LEN == KEYS_HASH_LEN, "the secret is a SHA-256");
	if (configured && *configured)
		return keys_sha256(configured, strlen(configured), session_secret);
	if (getrandom(session_secret, sizeof(session_secret), 0) != sizeof(session_secret))
		return METER_EIO;
	return METER_OK;
}

void session_operator_fingerprint(const char *operator_token, char *out, size_t len)
{
	unsigned char md[KEYS_HASH_LEN];

	if (len < 17 || keys_sha256(operator_token, strlen(operator_token), md) != METER_OK) {
		if (len)
			out[0] = '\0';
		return;
	}
	keys_hex(md, 8, out);
}

/* base64url without padding of n bytes into out (4 * ceil(n / 3) + 1). */
static void b64url(const unsigned char *in, size_t n, char *out)
{
	static const char tab[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t o = 0;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[o++] = tab[(v >> 18) & 63];
		out[o++] = tab[(v >> 12) & 63];
		if (i + 1 < n)
			out[o++] = tab[(v >> 6) & 63];
		if (i + 2 < n)
			out[o++] = tab[v & 63];
	}
	out[o] = '\0';
}

/* Decodes base64url (no padding) into out; returns the length or -1. */
static int unb64url(const char *in, size_t n, unsigned char *out, size_t cap)
{
	uint32_t v = 0;
	int bits = 0;
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		char c = in[i];
		int d;
		if (c >= 'A' && c <= 'Z')
			d = c - 'A';
		else if (c >= 'a' && c <= 'z')
			d = c - 'a' + 26;
		else if (c >= '0' && c <= '9')
			d = c - '0' + 52;
		else if (c == '-')
			d = 62;
		else if (c == '_')
			d = 63;
		else
			return -1;
		v = (v << 6) | (uint32_t)d;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o >= cap)
				return -1;
			out[o++] = (unsigned char)(v >> bits);
		}
	}
	return (int)o;
}

/* HMAC of text into mac (32 bytes). */
static bool mac_of(const char *text, size_t n, unsigned char *mac)
{
	unsigned int len = 0;

	return HMAC(EVP_sha256(), session_secret, sizeof(session_secret),
		    (const unsigned char *)text, n, mac, &len) != NULL &&
	       len == 32;
}

enum meter_rc session_issue(const struct auth *a, int64_t now_s, char *buf, size_t len)
{
	char payload[256], enc[360], macenc[48];
	unsigned char mac[32];
	int w;

	if (a->kind != AUTH_KEY && a->kind != AUTH_OPERATOR)
		return METER_EINVAL;
	w = snprintf(payload, sizeof(payload), "v1|%c|%s|%s|%lld",
		     a->kind == AUTH_KEY ? (a->role == ROLE_FULL ? 'f' : 'r') : 'o', a->account_id,
		     a->key_id, (long long)now_s + SESSION_TTL_S);
	if (w < 0 || (size_t)w >= sizeof(payload))
		return METER_ERANGE;
	b64url((const unsigned char *)payload, (size_t)w, enc);
	if (!mac_of(enc, strlen(enc), mac))
		return METER_EIO;
	b64url(mac, sizeof(mac), macenc);
	w = snprintf(buf, len, "%s.%s", enc, macenc);
	return w < 0 || (size_t)w >= len ? METER_ERANGE : METER_OK;
}

enum meter_rc session_verify(const char *cookie, int64_t now_s, struct auth *a)
{
	const char *dot = cookie ? strrchr(cookie, '.') : NULL;
	unsigned char mac[32], got[40];
	char payload[257], *f[5], *p;
	int n, nf = 0;
	int64_t expires;

	if (!dot || strlen(cookie) > 600)
		return METER_EINVAL;
	if (!mac_of(cookie, (size_t)(dot - cookie), mac) ||
	    unb64url(dot + 1, strlen(dot + 1), got, sizeof(got)) != 32 ||
	    CRYPTO_memcmp(mac, got, 32) != 0)
		return METER_EINVAL;
	n = unb64url(cookie, (size_t)(dot - cookie), (unsigned char *)payload, sizeof(payload) - 1);
	if (n < 0)
		return METER_EINVAL;
	payload[n] = '\0';
	/* "v1|k|account|key|expires": empty key for the operator. */
	for (p = payload; nf < 5; nf++) {
		f[nf] = p;
		p = strchr(p, '|');
		if (!p)
			break;
		*p++ = '\0';
	}
	if (nf != 4 || strcmp(f[0], "v1") != 0 || strlen(f[1]) != 1 ||
	    parse_int64(f[4], 0, INT64_MAX, &expires) != METER_OK || expires <= now_s ||
	    !parse_is_id(f[2]))
		return METER_EINVAL;
	memset(a, 0, sizeof(*a));
	snprintf(a->account_id, sizeof(a->account_id), "%s", f[2]);
	switch (f[1][0]) {
	case 'f':
	case 'r':
		if (!parse_is_id(f[3]))
			return METER_EINVAL;
		a->kind = AUTH_KEY;
		a->role = f[1][0] == 'f' ? ROLE_FULL : ROLE_READ_ONLY;
		snprintf(a->key_id, sizeof(a->key_id), "%s", f[3]);
		return METER_OK;
	case 'o':
		/* The key field holds the operator token's fingerprint. */
		if (!parse_is_id(f[3]))
			return METER_EINVAL;
		a->kind = AUTH_OPERATOR;
		a->role = ROLE_OPERATOR;
		snprintf(a->key_id, sizeof(a->key_id), "%s", f[3]);
		return METER_OK;
	}
	return METER_EINVAL;
}
