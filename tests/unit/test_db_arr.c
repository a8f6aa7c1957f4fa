/* Unit tests of the check engine's array parameters (meter/db_checks.h):
 * the bytes of PostgreSQL's binary array form for each element type, a
 * NULL element's flag, an empty array, and the elements an array's type
 * cannot take (a date that is not one, an int4 beyond its range, another
 * type's value, anything after its end), which fail the array rather than
 * send something else.
 * The integration tests hold the server to reading them. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "db_checks.h"

/* The big-endian int32 at p. */
static int64_t be32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;

	return (int32_t)((uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3]);
}

static int64_t be64(const char *p)
{
	return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint32_t)be32(p + 4));
}

/* Closes a and checks its header: one dimension of n elements from 1,
 * elem's oid, the null flag; returns where the elements start. */
static const char *closed(struct db_arr *a, int64_t elem, int64_t n, bool nulls)
{
	db_arr_close(a);
	CHECK(!a->oom);
	CHECK(a->a.b.n >= 20);
	CHECK_I64(be32(a->a.b.p), 1);
	CHECK_I64(be32(a->a.b.p + 4), nulls ? 1 : 0);
	CHECK_I64(be32(a->a.b.p + 8), elem);
	CHECK_I64(be32(a->a.b.p + 12), n);
	CHECK_I64(be32(a->a.b.p + 16), 1);
	CHECK_I64((int64_t)a->n, n);
	return a->a.b.p + 20;
}

static void test_types(void)
{
	struct db_arr a;
	const char *p;

	db_arr_init(&a, DB_ARR_TEXT);
	db_arr_str(&a, "acc_1");
	db_arr_str(&a, NULL);
	db_arr_str(&a, "a\"b\\c,{}"); /* no quoting in binary */
	p = closed(&a, 25, 3, true);
	CHECK_I64(be32(p), 5);
	CHECK(memcmp(p + 4, "acc_1", 5) == 0);
	CHECK_I64(be32(p + 9), -1);
	CHECK_I64(be32(p + 13), 8);
	CHECK(memcmp(p + 17, "a\"b\\c,{}", 8) == 0);
	CHECK_I64((int64_t)a.a.b.n, 20 + 9 + 4 + 12);
	db_arr_release(&a);
	CHECK(a.type == DB_ARR_TEXT && a.n == 0 && !a.closed);

	db_arr_init(&a, DB_ARR_INT8);
	db_arr_i64(&a, INT64_MIN);
	db_arr_i64(&a, 1000000000000000);
	p = closed(&a, 20, 2, false);
	CHECK_I64(be32(p), 8);
	CHECK_I64(be64(p + 4), INT64_MIN);
	CHECK_I64(be64(p + 16), 1000000000000000);
	db_arr_release(&a);

	db_arr_init(&a, DB_ARR_INT4);
	db_arr_i64(&a, INT32_MIN);
	db_arr_i64(&a, 1024);
	p = closed(&a, 23, 2, false);
	CHECK_I64(be32(p), 4);
	CHECK_I64(be32(p + 4), INT32_MIN);
	CHECK_I64(be32(p + 12), 1024);
	db_arr_release(&a);

	/* Days and µs since 2000-01-01, PostgreSQL's epoch. */
	db_arr_init(&a, DB_ARR_DATE);
	db_arr_str(&a, "2000-01-01");
	db_arr_str(&a, "2026-12-06");
	db_arr_str(&a, "1999-12-31");
	db_arr_str(&a, "2024-02-29");
	p = closed(&a, 1082, 4, false);
	CHECK_I64(be32(p), 4);
	CHECK_I64(be32(p + 4), 0);
	CHECK_I64(be32(p + 12), 9836);
	CHECK_I64(be32(p + 20), -1);
	CHECK_I64(be32(p + 28), 8825);
	db_arr_release(&a);

	db_arr_init(&a, DB_ARR_TIMESTAMPTZ);
	db_arr_time(&a, INT64_C(946684800000000));
	db_arr_time(&a, INT64_C(1796000523456789)); /* 2026-11-30T01:02:03.456789Z */
	db_arr_null(&a);
	p = closed(&a, 1184, 3, true);
	CHECK_I64(be32(p), 8);
	CHECK_I64(be64(p + 4), 0);
	CHECK_I64(be64(p + 16), INT64_C(1796000523456789) - INT64_C(946684800000000));
	CHECK_I64(be32(p + 24), -1);
	db_arr_release(&a);

	/* Empty: a header of no elements, which the server reads as '{}'. */
	db_arr_init(&a, DB_ARR_TEXT);
	closed(&a, 25, 0, false);
	CHECK_I64((int64_t)a.a.b.n, 20);
	db_arr_release(&a);
}

/* Each element its array's type cannot take fails the array. */
static void test_refused(void)
{
	static const char *const not_dates[] = {"2026-02-30",  "2026-13-01", "2026-00-10",
						"2026-1-01",   "26-12-06",   "2026/12/06",
						"2026-12-06 ", "",	     "2026-12-0x"};
	struct db_arr a;

	for (size_t i = 0; i < sizeof(not_dates) / sizeof(not_dates[0]); i++) {
		db_arr_init(&a, DB_ARR_DATE);
		db_arr_str(&a, "2026-12-06");
		db_arr_str(&a, not_dates[i]);
		db_arr_close(&a);
		CHECK(a.oom);
		db_arr_release(&a);
	}
	db_arr_init(&a, DB_ARR_INT4);
	db_arr_i64(&a, INT64_C(2147483648));
	db_arr_close(&a);
	CHECK(a.oom);
	db_arr_release(&a);
	db_arr_init(&a, DB_ARR_INT8);
	db_arr_str(&a, "1");
	db_arr_close(&a);
	CHECK(a.oom);
	db_arr_release(&a);
	db_arr_init(&a, DB_ARR_TEXT);
	db_arr_i64(&a, 1);
	CHECK(a.oom);
	db_arr_release(&a);
	db_arr_init(&a, DB_ARR_DATE);
	db_arr_time(&a, 0);
	CHECK(a.oom);
	db_arr_release(&a);
	/* Nor may anything follow its end. */
	db_arr_init(&a, DB_ARR_TEXT);
	db_arr_str(&a, "x");
	db_arr_close(&a);
	CHECK(!a.oom);
	db_arr_str(&a, "y");
	CHECK(a.oom);
	CHECK_I64((int64_t)a.n, 1);
	db_arr_release(&a);
}

/* The batch's arrays take their parameters' types. */
static void test_batch_types(void)
{
	struct db_arr arrs[DB_BATCH_NARR];

	db_checks_arrs_init(arrs);
	CHECK(arrs[DB_L_DAY].type == DB_ARR_DATE);
	CHECK(arrs[DB_H_DAY].type == DB_ARR_DATE);
	CHECK(arrs[DB_I_STATUS].type == DB_ARR_INT4);
	CHECK(arrs[DB_C_VCPUS].type == DB_ARR_INT4);
	CHECK(arrs[DB_H_AMOUNT].type == DB_ARR_INT8);
	CHECK(arrs[DB_C_LEASE_END].type == DB_ARR_TIMESTAMPTZ);
	CHECK(arrs[DB_R_XMIN].type == DB_ARR_TEXT);
	CHECK(arrs[DB_C_ANSWER].type == DB_ARR_TEXT);
}

int main(void)
{
	test_types();
	test_refused();
	test_batch_types();
	return check_done();
}
