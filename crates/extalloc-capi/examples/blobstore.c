/*
 * blobstore: a first program on extalloc's C API. Makes a volume on a new file, puts three
 * blobs under keys (each key the blob's attribute, stored in the same atomic put), reads one
 * back, deletes one, lists them, closes, opens the file again, rebuilds the index of keys
 * from the attributes and checks that every blob it kept reads back as written.
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

/* The key of blob `id` (its attribute) into `key`, which holds `cap` bytes. */
static void key_of(const extalloc_volume *vol, uint64_t id, char *key, size_t cap) {
  size_t len = 0;
  TRY(extalloc_volume_attr(vol, id, (uint8_t *)key, cap - 1, &len));
  key[len] = '\0';
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: blobstore PATH\n");
    return 2;
  }
  const char *path = argv[1];
  const char *keys[3] = {"a.txt", "b.txt", "c.txt"};
  const char *texts[3] = {"the first blob", "a second, longer blob of bytes", "third"};
  uint64_t ids[3];

  extalloc_volume *vol = NULL;
  TRY(extalloc_volume_create(path, 64u << 20, &vol));
  for (int i = 0; i < 3; i++)
    TRY(extalloc_volume_put_attr(vol, (const uint8_t *)keys[i], strlen(keys[i]),
                                 (const uint8_t *)texts[i], strlen(texts[i]), &ids[i]));
  size_t len;
  char *first = get_blob(vol, ids[0], &len);
  printf("put %s %s %s as blobs %llu %llu %llu; %s reads \"%s\"\n", keys[0], keys[1], keys[2],
         (unsigned long long)ids[0], (unsigned long long)ids[1], (unsigned long long)ids[2],
         keys[0], first);
  free(first);
  TRY(extalloc_volume_delete(vol, ids[1]));

  extalloc_statfs st;
  TRY(extalloc_volume_statfs(vol, &st));
  printf("%llu blobs after deleting %s; %llu of %llu blocks of %u bytes free\n",
         (unsigned long long)st.blobs, keys[1], (unsigned long long)st.free_blocks,
         (unsigned long long)st.blocks, st.block_size);
  TRY(extalloc_volume_close(vol)); /* syncs: everything above is durable */

  /* Reopened: the index of keys rebuilt from the list and each blob's attribute. */
  TRY(extalloc_volume_open(path, &vol));
  size_t count = 0;
  extalloc_code code = extalloc_volume_list(vol, NULL, 0, &count);
  if (code != EXTALLOC_OK && code != EXTALLOC_BUFFER_TOO_SMALL) fail("count query", code);
  uint64_t *listed = calloc(count ? count : 1, sizeof *listed);
  TRY(extalloc_volume_list(vol, listed, count, &count));
  int found = 0;
  for (size_t k = 0; k < count; k++) {
    char key[EXTALLOC_MAX_ATTR_BYTES + 1];
    key_of(vol, listed[k], key, sizeof key);
    for (int i = 0; i < 3; i += 2) {
      if (strcmp(key, keys[i]) != 0) continue;
      char *blob = get_blob(vol, listed[k], &len);
      if (len != strlen(texts[i]) || memcmp(blob, texts[i], len) != 0) {
        fprintf(stderr, "blobstore: %s changed across the reopen\n", key);
        return 1;
      }
      free(blob);
      found++;
    }
  }
  free(listed);
  if (count != 2 || found != 2) {
    fprintf(stderr, "blobstore: %zu blobs, %d of the 2 kept found by key\n", count, found);
    return 1;
  }
  TRY(extalloc_volume_close(vol));
  unlink(path);
  printf("reopened: %s and %s found by key and intact, %s gone\n", keys[0], keys[2], keys[1]);
  return 0;
}
