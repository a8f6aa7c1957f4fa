/* meter fuzzers: a standalone driver for the targets, for builds without
 * libFuzzer. Feeds every file named on the command line, and every regular
 * file of every directory named (in name order), to LLVMFuzzerTestOneInput
 * once, each in a buffer of exactly its size so that AddressSanitizer sees
 * a read past the end. A target's invariant failure or a sanitizer report
 * aborts the process; the name of the input is printed first.
 *
 *   fuzz_NAME DIR_OR_FILE...   exit 0 when every input ran, 1 otherwise
 *                              (an unreadable argument, or no input at all) */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

#define DRIVER_INPUT_MAX (4 * 1024 * 1024) /* bytes; corpus files are far smaller */

/* Reads path whole into a new buffer of exactly its size (*size bytes).
 * NULL on failure (reported). */
static uint8_t *read_input(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	struct stat st;

	if (!f) {
		fprintf(stderr, "driver: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0 || st.st_size < 0 || st.st_size > DRIVER_INPUT_MAX) {
		fprintf(stderr, "driver: %s: unreadable or larger than %d bytes\n", path,
			DRIVER_INPUT_MAX);
		goto out;
	}
	*size = (size_t)st.st_size;
	buf = malloc(*size ? *size : 1);
	if (!buf || fread(buf, 1, *size, f) != *size) {
		fprintf(stderr, "driver: %s: read failed\n", path);
		free(buf);
		buf = NULL;
	}
out:
	fclose(f);
	return buf;
}

/* Runs one file; false when it could not be read. */
static bool run_file(const char *path)
{
	size_t size = 0;
	uint8_t *data = read_input(path, &size);

	if (!data)
		return false;
	fprintf(stderr, "driver: %s (%zu bytes)\n", path, size);
	(void)LLVMFuzzerTestOneInput(data, size);
	free(data);
	return true;
}

static int name_cmp(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/* Runs every regular file of dir; *count gets how many. */
static bool run_dir(const char *dir, long *count)
{
	struct dirent **names = NULL;
	bool ok = true;
	int n = scandir(dir, &names, NULL, name_cmp);

	if (n < 0) {
		fprintf(stderr, "driver: %s: %s\n", dir, strerror(errno));
		return false;
	}
	for (int i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		int w = snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);

		if (w > 0 && (size_t)w < sizeof(path) && stat(path, &st) == 0 &&
		    S_ISREG(st.st_mode)) {
			if (run_file(path))
				(*count)++;
			else
				ok = false;
		}
		free(names[i]);
	}
	free(names);
	return ok;
}

int main(int argc, char **argv)
{
	long count = 0;
	bool ok = true;

	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		(void)LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "driver: %s: %s\n", argv[i], strerror(errno));
			ok = false;
		} else if (S_ISDIR(st.st_mode)) {
			ok = run_dir(argv[i], &count) && ok;
		} else if (run_file(argv[i])) {
			count++;
		} else {
			ok = false;
		}
	}
	printf("driver: %ld inputs run\n", count);
	if (count == 0)
		fprintf(stderr, "driver: no input at all\n");
	return ok && count > 0 ? 0 : 1;
}
