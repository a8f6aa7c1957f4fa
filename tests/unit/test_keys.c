/* Unit: key ids, secrets, tokens and hashes (meter/keys.h). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "keys.h"
#include "parse.h"

static void test_base64url(void)
{
	static const struct {
		const char *in;
		const char *want;
	} v[] = {
	    {"", ""},		{"f", "Zg"},	      {"fo", "Zm8"},	      {"foo", "Zm9v"},
	    {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"}, {"\xfb\xff", "-_8"},
	};
	char out[16];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		CHECK(keys_base64url((const unsigned char *)v[i].in, strlen(v[i].in), out,
				     sizeof(out)) == METER_OK);
		CHECK_STR(out, v[i].want);
	}
	/* Exactly big enough, then one byte short. */
	CHECK(keys_base64url((const unsigned char *)"foo", 3, out, 5) == METER_OK);
	CHECK(keys_base64url((const unsigned char *)"foo", 3, out, 4) == METER_EINVAL);
}

static void test_ids_and_secrets(void)
{
	char a[KEYS_GEN_ID_LEN + 1], b[KEYS_GEN_ID_LEN + 1];
	char s1[KEYS_SECRET_LEN + 1], s2[KEYS_SECRET_LEN + 1];

	CHECK(keys_new_key_id(a, sizeof(a)) == METER_OK);
	CHECK(keys_new_key_id(b, sizeof(b)) == METER_OK);
	CHECK_I64(strlen(a), KEYS_GEN_ID_LEN);
	CHECK(strncmp(a, "key_", 4) == 0);
	CHECK_I64(strspn(a + 4, "0123456789abcdef"), 16);
	CHECK(parse_is_id(a));
	CHECK(strcmp(a, b) != 0);
	CHECK(keys_new_account_id(a, sizeof(a)) == METER_OK);
	CHECK(strncmp(a, "acc_", 4) == 0 && strlen(a) == KEYS_GEN_ID_LEN);
	CHECK(keys_new_key_id(a, KEYS_GEN_ID_LEN) == METER_EINVAL);

	CHECK(keys_new_secret(s1, sizeof(s1)) == METER_OK);
	CHECK(keys_new_secret(s2, sizeof(s2)) == METER_OK);
	CHECK_I64(strlen(s1), KEYS_SECRET_LEN);
	CHECK_I64(strspn(s1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
		  KEYS_SECRET_LEN);
	CHECK(strcmp(s1, s2) != 0);
	CHECK(keys_new_secret(s1, KEYS_SECRET_LEN) == METER_EINVAL);
}

static void test_hash(void)
{
	/* FIPS 180-2's example: SHA-256("abc"). */
	static const unsigned char abc[KEYS_HASH_LEN] = {
	    0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40,
	    0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17,
	    0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
	unsigned char h[KEYS_HASH_LEN], h2[KEYS_HASH_LEN];
	char hex[2 * KEYS_HASH_LEN + 1];

	CHECK(keys_hash_secret("abc", 3, h) == METER_OK);
	CHECK(memcmp(h, abc, sizeof(h)) == 0);
	CHECK(keys_hash_equal(h, abc));
	CHECK(keys_hash_secret("abd", 3, h2) == METER_OK);
	CHECK(!keys_hash_equal(h, h2));
	memcpy(h2, h, sizeof(h2));
	h2[KEYS_HASH_LEN - 1] ^= 1; /* the last byte counts too */
	CHECK(!keys_hash_equal(h, h2));
	/* The digest the engine hashes requests with, from many threads at
	 * once (its implementation is fetched once, by whichever comes first),
	 * and its hex. */
	CHECK(keys_sha256("abc", 3, h2) == METER_OK);
	CHECK(memcmp(h2, abc, sizeof(h2)) == 0);
	keys_hex(h2, sizeof(h2), hex);
	CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	keys_hex(h2, 0, hex);
	CHECK_STR(hex, "");
}

/* Threads hashing at once, each checking every digest it makes. */
static void *hash_thread(void *arg)
{
	unsigned char h[KEYS_HASH_LEN];
	int *bad = arg;

	for (int i = 0; i < 2000; i++)
		if (keys_sha256("abc", 3, h) != METER_OK || h[0] != 0xba || h[31] != 0xad)
			(*bad)++;
	return NULL;
}

static void test_hash_threads(void)
{
	pthread_t t[8];
	int bad[8] = {0};

	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, hash_thread, &bad[i]) == 0);
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		CHECK_I64(bad[i], 0);
	}
}

static void test_tokens(void)
{
	char tok[KEYS_TOKEN_MAX + 1], id[PARSE_ID_MAX + 1];
	char longid[PARSE_ID_MAX + 2];
	const char *secret = NULL;

	CHECK(keys_token_format("key_0123456789abcdef", "c2VjcmV0", tok, sizeof(tok)) == METER_OK);
	CHECK_STR(tok, "key_0123456789abcdef.c2VjcmV0");
	CHECK(keys_token_split(tok, id, &secret) == METER_OK);
	CHECK_STR(id, "key_0123456789abcdef");
	CHECK_STR(secret, "c2VjcmV0");
	/* A key id with dots: the token splits at the last one. */
	CHECK(keys_token_split("a.b.c.s3cr-_t", id, &secret) == METER_OK);
	CHECK_STR(id, "a.b.c");
	CHECK_STR(secret, "s3cr-_t");
	CHECK(keys_token_format("bad id", "x", tok, sizeof(tok)) == METER_EINVAL);
	CHECK(keys_token_format("k", "xyz", tok, 5) == METER_EINVAL);

	CHECK(keys_token_split("nodot", id, &secret) == METER_EINVAL);
	CHECK(keys_token_split(".secret", id, &secret) == METER_EINVAL);
	CHECK(keys_token_split("key.", id, &secret) == METER_EINVAL);
	CHECK(keys_token_split("k y.secret", id, &secret) == METER_EINVAL);
	CHECK(keys_token_split("key.sec=ret", id, &secret) == METER_EINVAL);
	CHECK(keys_token_split("key.sec ret", id, &secret) == METER_EINVAL);
	memset(longid, 'a', PARSE_ID_MAX + 1);
	longid[PARSE_ID_MAX + 1] = '\0';
	snprintf(tok, sizeof(tok), "%s.secret", longid);
	CHECK(keys_token_split(tok, id, &secret) == METER_EINVAL);
	longid[PARSE_ID_MAX] = '\0'; /* exactly 64: fine */
	snprintf(tok, sizeof(tok), "%s.secret", longid);
	CHECK(keys_token_split(tok, id, &secret) == METER_OK);
	CHECK_I64(strlen(id), PARSE_ID_MAX);
}

int main(void)
{
	test_base64url();
	test_ids_and_secrets();
	test_hash_threads();
	test_hash();
	test_tokens();
	return check_done();
}
