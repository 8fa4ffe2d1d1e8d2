/*
 * blobstore: a first program on extalloc's C API. Makes a volume on a new file, puts three
 * blobs, reads one back, deletes one, lists them, closes, opens the file again and checks
 * that every blob it kept reads back as written.
 *
 *   blobstore PATH     (PATH must not exist; it is removed at the end)
 *
 * Build (docs/c.md): cargo build --release -p extalloc-capi, then
 *   gcc -Icrates/extalloc-capi/include crates/extalloc-capi/examples/blobstore.c \
 *       -Ltarget/release -lextalloc_capi -Wl,-rpath,$PWD/target/release -o blobstore
 */
#include "extalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Prints the failed call, its code and the thread's last error, and exits. */
static void fail(const char *what, extalloc_code code) {
  char message[512];
  extalloc_last_error(message, sizeof message);
  fprintf(stderr, "blobstore: %s: %s: %s\n", what, extalloc_code_name(code), message);
  exit(1);
}

#define TRY(call)                                                                        \
  do {                                                                                   \
    extalloc_code code_ = (call);                                                        \
    if (code_ != EXTALLOC_OK) fail(#call, code_);                                        \
  } while (0)

/* Reads blob `id` into a buffer sized by a size query; the caller frees it. */
static char *get_blob(const extalloc_volume *vol, uint64_t id, size_t *len) {
  extalloc_code code = extalloc_volume_get(vol, id, NULL, 0, len);
  if (code != EXTALLOC_OK && code != EXTALLOC_BUFFER_TOO_SMALL) fail("size query", code);
  char *buf = malloc(*len + 1);
  TRY(extalloc_volume_get(vol, id, (uint8_t *)buf, *len, len));
  buf[*len] = '\0';
  return buf;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: blobstore PATH\n");
    return 2;
  }
  const char *path = argv[1];
  const char *texts[3] = {"the first blob", "a second, longer blob of bytes", "third"};
  uint64_t ids[3];

  extalloc_volume *vol = NULL;
  TRY(extalloc_volume_create(path, 64u << 20, &vol));
  for (int i = 0; i < 3; i++)
    TRY(extalloc_volume_put(vol, (const uint8_t *)texts[i], strlen(texts[i]), &ids[i]));
  size_t len;
  char *first = get_blob(vol, ids[0], &len);
  printf("put blobs %llu %llu %llu; blob %llu reads \"%s\"\n", (unsigned long long)ids[0],
         (unsigned long long)ids[1], (unsigned long long)ids[2], (unsigned long long)ids[0],
         first);
  free(first);
  TRY(extalloc_volume_delete(vol, ids[1]));

  size_t count = 0;
  extalloc_code code = extalloc_volume_list(vol, NULL, 0, &count);
  if (code != EXTALLOC_OK && code != EXTALLOC_BUFFER_TOO_SMALL) fail("count query", code);
  uint64_t *listed = calloc(count ? count : 1, sizeof *listed);
  TRY(extalloc_volume_list(vol, listed, count, &count));
  printf("%zu blobs after deleting %llu\n", count, (unsigned long long)ids[1]);
  free(listed);

  extalloc_statfs st;
  TRY(extalloc_volume_statfs(vol, &st));
  printf("%llu of %llu blocks of %u bytes free\n", (unsigned long long)st.free_blocks,
         (unsigned long long)st.blocks, st.block_size);
  TRY(extalloc_volume_close(vol)); /* syncs: everything above is durable */

  TRY(extalloc_volume_open(path, &vol));
  for (int i = 0; i < 3; i += 2) {
    char *blob = get_blob(vol, ids[i], &len);
    if (len != strlen(texts[i]) || memcmp(blob, texts[i], len) != 0) {
      fprintf(stderr, "blobstore: blob %llu changed across the reopen\n",
              (unsigned long long)ids[i]);
      return 1;
    }
    free(blob);
  }
  code = extalloc_volume_get(vol, ids[1], NULL, 0, &len);
  if (code != EXTALLOC_NOT_FOUND) fail("the deleted blob is still there", code);
  TRY(extalloc_volume_close(vol));
  unlink(path);
  printf("reopened: blobs %llu and %llu intact, %llu gone\n", (unsigned long long)ids[0],
         (unsigned long long)ids[2], (unsigned long long)ids[1]);
  return 0;
}
