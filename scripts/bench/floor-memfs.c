// The FUSE floor: an in-memory file system with no storage, served by libfuse's low-level
// API, which `extalloc compare-fs --fs floor,floor-uring` runs beside extalloc's mount to
// measure what FUSE itself costs per operation (docs/lab.md, docs/results.md "FUSE floor").
// The project's own program, written against libfuse's public headers only; built by
// scripts/bench/build-floor.sh against libfuse 3.19 (FUSE over io_uring when the environment has
// FUSE_URING_ENABLE=1 and the kernel offers it).
//
//   floor-memfs MOUNTPOINT -f [-s] [-o default_permissions,allow_other,...]
//
// Data structures: every inode in one hash table keyed by inode number (`inodes`); every
// directory entry in one hash table keyed by (parent inode, name) (`dentries`), which also
// sits in its directory's slot array (`struct dir`) so readdir has stable offsets: a slot
// freed by unlink or rename stays empty (offset = slot + 1) until the directory is closed
// by every reader, then the array is compacted. File data is one malloc'd buffer per inode.
//
// Invariants: one mutex (`lock`) guards everything (the floor is about the transport, not
// about the daemon's concurrency); an inode is freed when it has no link, no kernel
// reference (lookup count) and no open handle; a directory's `nlink` is 2 + its
// subdirectories. Answers carry 1 h entry, attribute and negative timeouts; the mount asks
// for the writeback cache and parallel directory operations; opens set `noflush`, so the
// kernel sends no FLUSH; extended attributes are answered (kept in memory), so a security.*
// query costs the same request it costs extalloc.
#define FUSE_USE_VERSION 317
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define TTL 3600.0

struct xattr {
    struct xattr *next;
    char *name;
    char *value;
    size_t size;
};

struct slot {
    struct dentry *d; // NULL: a freed slot
};

struct dir {
    struct slot *slots;
    size_t len, cap, freed;
    unsigned readers; // open handles: no compaction while any is open
};

struct inode {
    struct inode *next; // hash chain
    fuse_ino_t ino;
    struct stat st;
    uint64_t lookups; // kernel references
    unsigned opens;
    char *data; // regular file bytes, or a symlink's target
    size_t cap;
    struct dir dir;
    struct xattr *xattrs;
};

struct dentry {
    struct dentry *next; // hash chain
    fuse_ino_t parent;
    char *name;
    struct inode *inode;
    size_t slot;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct inode **inodes;
static size_t inode_buckets, inode_count;
static struct dentry **dentries;
static size_t dentry_buckets, dentry_count;
static fuse_ino_t next_ino = FUSE_ROOT_ID;

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static uint64_t name_hash(fuse_ino_t parent, const char *name) {
    uint64_t h = 0xcbf29ce484222325ULL ^ parent;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    return mix(h);
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "floor-memfs: out of memory\n");
        abort();
    }
    return p;
}

static struct inode *inode_get(fuse_ino_t ino) {
    struct inode *i = inodes[mix(ino) & (inode_buckets - 1)];
    while (i && i->ino != ino)
        i = i->next;
    return i;
}

static void inode_grow(void) {
    size_t n = inode_buckets * 2;
    struct inode **t = xcalloc(n, sizeof *t);
    for (size_t b = 0; b < inode_buckets; b++) {
        for (struct inode *i = inodes[b], *next; i; i = next) {
            next = i->next;
            size_t k = mix(i->ino) & (n - 1);
            i->next = t[k];
            t[k] = i;
        }
    }
    free(inodes);
    inodes = t;
    inode_buckets = n;
}

static struct timespec now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t;
}

static struct inode *inode_new(mode_t mode, const struct fuse_ctx *ctx) {
    if (inode_count + 1 > inode_buckets)
        inode_grow();
    struct inode *i = xcalloc(1, sizeof *i);
    i->ino = next_ino++;
    i->st.st_ino = i->ino;
    i->st.st_mode = mode;
    i->st.st_nlink = S_ISDIR(mode) ? 2 : 1;
    i->st.st_uid = ctx ? ctx->uid : 0;
    i->st.st_gid = ctx ? ctx->gid : 0;
    i->st.st_blksize = 4096;
    i->st.st_atim = i->st.st_mtim = i->st.st_ctim = now();
    size_t k = mix(i->ino) & (inode_buckets - 1);
    i->next = inodes[k];
    inodes[k] = i;
    inode_count++;
    return i;
}

// Frees `i` once nothing refers to it any more.
static void inode_maybe_free(struct inode *i) {
    if (i->st.st_nlink > 0 || i->lookups > 0 || i->opens > 0 || i->ino == FUSE_ROOT_ID)
        return;
    struct inode **p = &inodes[mix(i->ino) & (inode_buckets - 1)];
    while (*p != i)
        p = &(*p)->next;
    *p = i->next;
    inode_count--;
    for (struct xattr *x = i->xattrs, *next; x; x = next) {
        next = x->next;
        free(x->name);
        free(x->value);
        free(x);
    }
    free(i->dir.slots);
    free(i->data);
    free(i);
}

static struct dentry **dentry_find(fuse_ino_t parent, const char *name) {
    struct dentry **p = &dentries[name_hash(parent, name) & (dentry_buckets - 1)];
    while (*p && ((*p)->parent != parent || strcmp((*p)->name, name) != 0))
        p = &(*p)->next;
    return p;
}

static void dentry_grow(void) {
    size_t n = dentry_buckets * 2;
    struct dentry **t = xcalloc(n, sizeof *t);
    for (size_t b = 0; b < dentry_buckets; b++) {
        for (struct dentry *d = dentries[b], *next; d; d = next) {
            next = d->next;
            size_t k = name_hash(d->parent, d->name) & (n - 1);
            d->next = t[k];
            t[k] = d;
        }
    }
    free(dentries);
    dentries = t;
    dentry_buckets = n;
}

// Links `child` as `name` in `dir` (the name must be free).
static void dentry_add(struct inode *dir, const char *name, struct inode *child) {
    if (dentry_count + 1 > dentry_buckets)
        dentry_grow();
    struct dentry *d = xcalloc(1, sizeof *d);
    d->parent = dir->ino;
    d->name = strdup(name);
    d->inode = child;
    struct dir *s = &dir->dir;
    if (s->len == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->slots = realloc(s->slots, s->cap * sizeof *s->slots);
        if (!s->slots)
            abort();
    }
    d->slot = s->len;
    s->slots[s->len++].d = d;
    size_t k = name_hash(d->parent, name) & (dentry_buckets - 1);
    d->next = dentries[k];
    dentries[k] = d;
    dentry_count++;
    if (S_ISDIR(child->st.st_mode))
        dir->st.st_nlink++;
    dir->st.st_mtim = dir->st.st_ctim = now();
}

// Compacts a directory's slots when no reader holds offsets into them.
static void dir_compact(struct dir *s) {
    if (s->readers > 0 || s->freed * 2 < s->len)
        return;
    size_t out = 0;
    for (size_t k = 0; k < s->len; k++) {
        if (s->slots[k].d) {
            s->slots[k].d->slot = out;
            s->slots[out++] = s->slots[k];
        }
    }
    s->len = out;
    s->freed = 0;
}

// Takes the entry at `p` out of `dir` (its hash chain and its slot) and frees it; returns
// its inode, whose link count is the caller's to change.
static struct inode *dentry_detach(struct inode *dir, struct dentry **p) {
    struct dentry *d = *p;
    struct inode *i = d->inode;
    *p = d->next;
    dentry_count--;
    dir->dir.slots[d->slot].d = NULL;
    dir->dir.freed++;
    if (S_ISDIR(i->st.st_mode))
        dir->st.st_nlink--;
    i->st.st_ctim = dir->st.st_mtim = dir->st.st_ctim = now();
    free(d->name);
    free(d);
    dir_compact(&dir->dir);
    return i;
}

// Unlinks the entry at `p` from `dir`; the inode loses a link (and is freed if unused).
static void dentry_remove(struct inode *dir, struct dentry **p) {
    struct inode *i = dentry_detach(dir, p);
    if (S_ISDIR(i->st.st_mode))
        i->st.st_nlink = 0;
    else
        i->st.st_nlink--;
    inode_maybe_free(i);
}

static void fill_entry(struct fuse_entry_param *e, struct inode *i) {
    memset(e, 0, sizeof *e);
    e->ino = i->ino;
    e->generation = 1;
    e->attr = i->st;
    e->attr.st_blocks = (i->st.st_size + 511) / 512;
    e->attr_timeout = TTL;
    e->entry_timeout = TTL;
    i->lookups++;
}

static void reply_stat(fuse_req_t req, struct inode *i) {
    struct stat st = i->st;
    st.st_blocks = (st.st_size + 511) / 512;
    pthread_mutex_unlock(&lock);
    fuse_reply_attr(req, &st, TTL);
}

static void floor_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    fuse_set_feature_flag(conn, FUSE_CAP_WRITEBACK_CACHE);
    fuse_set_feature_flag(conn, FUSE_CAP_PARALLEL_DIROPS);
    fuse_set_feature_flag(conn, FUSE_CAP_ASYNC_READ);
}

static void floor_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct fuse_entry_param e;
    pthread_mutex_lock(&lock);
    struct dentry *d = *dentry_find(parent, name);
    if (d) {
        fill_entry(&e, d->inode);
    } else {
        memset(&e, 0, sizeof e); // a negative entry, cached for the same hour
        e.entry_timeout = TTL;
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_entry(req, &e);
}

static void forget_locked(fuse_ino_t ino, uint64_t n) {
    struct inode *i = inode_get(ino);
    if (!i)
        return;
    i->lookups = i->lookups > n ? i->lookups - n : 0;
    inode_maybe_free(i);
}

static void floor_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n) {
    pthread_mutex_lock(&lock);
    forget_locked(ino, n);
    pthread_mutex_unlock(&lock);
    fuse_reply_none(req);
}

static void floor_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f) {
    pthread_mutex_lock(&lock);
    for (size_t k = 0; k < count; k++)
        forget_locked(f[k].ino, f[k].nlookup);
    pthread_mutex_unlock(&lock);
    fuse_reply_none(req);
}

static void floor_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    if (!i) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, ENOENT);
        return;
    }
    reply_stat(req, i);
}

static int resize(struct inode *i, size_t size) {
    if (size > i->cap) {
        size_t cap = i->cap ? i->cap : 4096;
        while (cap < size)
            cap *= 2;
        char *p = realloc(i->data, cap);
        if (!p)
            return ENOSPC;
        i->data = p;
        i->cap = cap;
    }
    if (size > (size_t)i->st.st_size)
        memset(i->data + i->st.st_size, 0, size - i->st.st_size);
    i->st.st_size = size;
    return 0;
}

static void floor_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int set,
                          struct fuse_file_info *fi) {
    (void)fi;
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    int err = i ? 0 : ENOENT;
    if (!err && (set & FUSE_SET_ATTR_SIZE))
        err = S_ISREG(i->st.st_mode) ? resize(i, a->st_size) : EISDIR;
    if (err) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, err);
        return;
    }
    struct timespec t = now();
    if (set & FUSE_SET_ATTR_MODE)
        i->st.st_mode = (i->st.st_mode & S_IFMT) | (a->st_mode & 07777);
    if (set & FUSE_SET_ATTR_UID)
        i->st.st_uid = a->st_uid;
    if (set & FUSE_SET_ATTR_GID)
        i->st.st_gid = a->st_gid;
    if (set & FUSE_SET_ATTR_ATIME)
        i->st.st_atim = (set & FUSE_SET_ATTR_ATIME_NOW) ? t : a->st_atim;
    if (set & FUSE_SET_ATTR_MTIME)
        i->st.st_mtim = (set & FUSE_SET_ATTR_MTIME_NOW) ? t : a->st_mtim;
    i->st.st_ctim = (set & FUSE_SET_ATTR_CTIME) ? a->st_ctim : t;
    reply_stat(req, i);
}

// Makes `name` in `parent`: a new inode of `mode`, linked; replies with its entry (or
// with the file opened, when `fi` is given).
static void make(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
                 const char *link, struct fuse_file_info *fi) {
    struct fuse_entry_param e;
    pthread_mutex_lock(&lock);
    struct inode *dir = inode_get(parent);
    int err = !dir ? ENOENT : !S_ISDIR(dir->st.st_mode) ? ENOTDIR
              : *dentry_find(parent, name) ? EEXIST : 0;
    if (err) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, err);
        return;
    }
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    struct inode *i = inode_new(mode, ctx);
    if (dir->st.st_mode & S_ISGID) {
        i->st.st_gid = dir->st.st_gid;
        if (S_ISDIR(mode))
            i->st.st_mode |= S_ISGID;
    }
    i->st.st_rdev = rdev;
    if (link) {
        i->data = strdup(link);
        i->cap = i->st.st_size = strlen(link);
    }
    dentry_add(dir, name, i);
    fill_entry(&e, i);
    if (fi) {
        i->opens++;
        fi->noflush = 1;
        fi->keep_cache = 1;
    }
    pthread_mutex_unlock(&lock);
    if (fi)
        fuse_reply_create(req, &e, fi);
    else
        fuse_reply_entry(req, &e);
}

static void floor_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                        dev_t rdev) {
    make(req, parent, name, mode, rdev, NULL, NULL);
}

static void floor_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    make(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL, NULL);
}

static void floor_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
                          const char *name) {
    make(req, parent, name, S_IFLNK | 0777, 0, link, NULL);
}

static void floor_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                         struct fuse_file_info *fi) {
    make(req, parent, name, S_IFREG | (mode & 07777), 0, NULL, fi);
}

static void floor_readlink(fuse_req_t req, fuse_ino_t ino) {
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    if (!i || !S_ISLNK(i->st.st_mode)) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, i ? EINVAL : ENOENT);
        return;
    }
    char *target = strndup(i->data, i->st.st_size);
    pthread_mutex_unlock(&lock);
    fuse_reply_readlink(req, target);
    free(target);
}

static void floor_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                       const char *newname) {
    struct fuse_entry_param e;
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino), *dir = inode_get(newparent);
    int err = !i || !dir ? ENOENT : S_ISDIR(i->st.st_mode) ? EPERM
              : *dentry_find(newparent, newname) ? EEXIST : 0;
    if (err) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, err);
        return;
    }
    i->st.st_nlink++;
    dentry_add(dir, newname, i);
    i->st.st_ctim = now();
    fill_entry(&e, i);
    pthread_mutex_unlock(&lock);
    fuse_reply_entry(req, &e);
}

static bool dir_empty(struct inode *i) {
    return i->dir.len == i->dir.freed;
}

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, bool want_dir) {
    pthread_mutex_lock(&lock);
    struct inode *dir = inode_get(parent);
    struct dentry **p = dentry_find(parent, name);
    int err = !dir || !*p ? ENOENT : 0;
    if (!err) {
        bool is_dir = S_ISDIR((*p)->inode->st.st_mode);
        if (want_dir && !is_dir)
            err = ENOTDIR;
        else if (!want_dir && is_dir)
            err = EISDIR;
        else if (is_dir && !dir_empty((*p)->inode))
            err = ENOTEMPTY;
    }
    if (!err)
        dentry_remove(dir, p);
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, err);
}

static void floor_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
    remove_entry(req, parent, name, false);
}

static void floor_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
    remove_entry(req, parent, name, true);
}

static int rename_locked(fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                         const char *newname, unsigned flags) {
    struct inode *from = inode_get(parent), *to = inode_get(newparent);
    struct dentry **src = dentry_find(parent, name);
    if (!from || !to || !*src)
        return ENOENT;
    if (flags & ~RENAME_NOREPLACE)
        return EINVAL; // RENAME_EXCHANGE and RENAME_WHITEOUT are not served
    // The kernel refuses a rename of a directory into its own subtree (lock_rename).
    struct inode *moved = (*src)->inode;
    struct dentry **dst = dentry_find(newparent, newname);
    if (*dst) {
        if (*dst == *src)
            return 0;
        struct inode *old = (*dst)->inode;
        if (flags & RENAME_NOREPLACE)
            return EEXIST;
        if (S_ISDIR(moved->st.st_mode) != S_ISDIR(old->st.st_mode))
            return S_ISDIR(old->st.st_mode) ? EISDIR : ENOTDIR;
        if (S_ISDIR(old->st.st_mode) && !dir_empty(old))
            return ENOTEMPTY;
        dentry_remove(to, dst);
        src = dentry_find(parent, name);
    }
    dentry_detach(from, src);
    dentry_add(to, newname, moved);
    return 0;
}

static void floor_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                         fuse_ino_t newparent, const char *newname, unsigned int flags) {
    pthread_mutex_lock(&lock);
    int err = rename_locked(parent, name, newparent, newname, flags);
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, err);
}

static void floor_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    int err = i ? 0 : ENOENT;
    if (i && (fi->flags & O_TRUNC) && S_ISREG(i->st.st_mode))
        err = resize(i, 0);
    if (!err)
        i->opens++;
    pthread_mutex_unlock(&lock);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    fi->noflush = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void floor_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    if (i) {
        i->opens--;
        inode_maybe_free(i);
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, 0);
}

static void floor_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi) {
    (void)fi;
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    if (!i) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, ENOENT);
        return;
    }
    size_t n = off < i->st.st_size ? (size_t)(i->st.st_size - off) : 0;
    if (n > size)
        n = size;
    char *buf = malloc(n ? n : 1);
    if (n)
        memcpy(buf, i->data + off, n);
    pthread_mutex_unlock(&lock);
    fuse_reply_buf(req, buf, n);
    free(buf);
}

static void floor_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                        off_t off, struct fuse_file_info *fi) {
    (void)fi;
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    int err = i ? 0 : ENOENT;
    if (!err && (size_t)off + size > (size_t)i->st.st_size)
        err = resize(i, off + size);
    if (!err) {
        memcpy(i->data + off, buf, size);
        i->st.st_mtim = i->st.st_ctim = now();
    }
    pthread_mutex_unlock(&lock);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_write(req, size);
}

static void floor_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                        struct fuse_file_info *fi) {
    (void)ino;
    (void)datasync;
    (void)fi;
    fuse_reply_err(req, 0); // nothing to make durable
}

static void floor_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    int err = !i ? ENOENT : !S_ISDIR(i->st.st_mode) ? ENOTDIR : 0;
    if (!err)
        i->dir.readers++;
    pthread_mutex_unlock(&lock);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_open(req, fi);
}

static void floor_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    if (i) {
        i->dir.readers--;
        dir_compact(&i->dir);
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, 0);
}

// Offsets: 1 is ".", 2 "..", 3 + k the slot k.
static void floor_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                          struct fuse_file_info *fi) {
    (void)fi;
    char *buf = xcalloc(1, size);
    size_t used = 0;
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    if (!i) {
        pthread_mutex_unlock(&lock);
        free(buf);
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct stat st = {0};
    for (off_t o = off; ; o++) {
        const char *name;
        if (o == 0 || o == 1) {
            name = o == 0 ? "." : "..";
            st.st_ino = ino;
            st.st_mode = S_IFDIR;
        } else if ((size_t)(o - 2) < i->dir.len) {
            struct dentry *d = i->dir.slots[o - 2].d;
            if (!d)
                continue;
            name = d->name;
            st.st_ino = d->inode->ino;
            st.st_mode = d->inode->st.st_mode;
        } else {
            break;
        }
        size_t n = fuse_add_direntry(req, buf + used, size - used, name, &st, o + 1);
        if (n > size - used)
            break;
        used += n;
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void floor_statfs(fuse_req_t req, fuse_ino_t ino) {
    (void)ino;
    struct statvfs s = {0};
    s.f_bsize = s.f_frsize = 4096;
    s.f_blocks = s.f_bfree = s.f_bavail = 1ULL << 28;
    s.f_files = s.f_ffree = s.f_favail = 1ULL << 32;
    s.f_namemax = 255;
    fuse_reply_statfs(req, &s);
}

static struct xattr **xattr_find(struct inode *i, const char *name) {
    struct xattr **p = &i->xattrs;
    while (*p && strcmp((*p)->name, name) != 0)
        p = &(*p)->next;
    return p;
}

static void floor_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                           size_t size, int flags) {
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    int err = i ? 0 : ENOENT;
    struct xattr **p = i ? xattr_find(i, name) : NULL;
    if (!err && *p && (flags & XATTR_CREATE))
        err = EEXIST;
    else if (!err && !*p && (flags & XATTR_REPLACE))
        err = ENODATA;
    if (!err) {
        if (!*p) {
            *p = xcalloc(1, sizeof **p);
            (*p)->name = strdup(name);
        }
        free((*p)->value);
        (*p)->value = malloc(size ? size : 1);
        memcpy((*p)->value, value, size);
        (*p)->size = size;
        i->st.st_ctim = now();
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, err);
}

static void floor_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    struct xattr *x = i ? *xattr_find(i, name) : NULL;
    if (!x) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, i ? ENODATA : ENOENT);
        return;
    }
    if (size == 0) {
        size_t n = x->size;
        pthread_mutex_unlock(&lock);
        fuse_reply_xattr(req, n);
    } else if (size < x->size) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, ERANGE);
    } else {
        char *v = malloc(x->size ? x->size : 1);
        size_t n = x->size;
        memcpy(v, x->value, n);
        pthread_mutex_unlock(&lock);
        fuse_reply_buf(req, v, n);
        free(v);
    }
}

static void floor_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    if (!i) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, ENOENT);
        return;
    }
    size_t n = 0;
    for (struct xattr *x = i->xattrs; x; x = x->next)
        n += strlen(x->name) + 1;
    if (size == 0 || size < n) {
        pthread_mutex_unlock(&lock);
        if (size == 0)
            fuse_reply_xattr(req, n);
        else
            fuse_reply_err(req, ERANGE);
        return;
    }
    char *buf = malloc(n ? n : 1), *p = buf;
    for (struct xattr *x = i->xattrs; x; x = x->next)
        p = stpcpy(p, x->name) + 1;
    pthread_mutex_unlock(&lock);
    fuse_reply_buf(req, buf, n);
    free(buf);
}

static void floor_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
    pthread_mutex_lock(&lock);
    struct inode *i = inode_get(ino);
    struct xattr **p = i ? xattr_find(i, name) : NULL;
    int err = !i ? ENOENT : !*p ? ENODATA : 0;
    if (!err) {
        struct xattr *x = *p;
        *p = x->next;
        free(x->name);
        free(x->value);
        free(x);
        i->st.st_ctim = now();
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, err);
}

static const struct fuse_lowlevel_ops ops = {
    .init = floor_init,
    .lookup = floor_lookup,
    .forget = floor_forget,
    .forget_multi = floor_forget_multi,
    .getattr = floor_getattr,
    .setattr = floor_setattr,
    .readlink = floor_readlink,
    .mknod = floor_mknod,
    .mkdir = floor_mkdir,
    .unlink = floor_unlink,
    .rmdir = floor_rmdir,
    .symlink = floor_symlink,
    .rename = floor_rename,
    .link = floor_link,
    .open = floor_open,
    .read = floor_read,
    .write = floor_write,
    .release = floor_release,
    .fsync = floor_fsync,
    .opendir = floor_opendir,
    .readdir = floor_readdir,
    .releasedir = floor_releasedir,
    .fsyncdir = floor_fsync,
    .statfs = floor_statfs,
    .setxattr = floor_setxattr,
    .getxattr = floor_getxattr,
    .listxattr = floor_listxattr,
    .removexattr = floor_removexattr,
    .create = floor_create,
};

int main(int argc, char **argv) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_cmdline_opts opts;
    if (fuse_parse_cmdline(&args, &opts) != 0 || !opts.mountpoint) {
        fprintf(stderr, "usage: %s MOUNTPOINT [-f] [-s] [-o OPTIONS]\n", argv[0]);
        return 2;
    }
    inode_buckets = dentry_buckets = 1024;
    inodes = xcalloc(inode_buckets, sizeof *inodes);
    dentries = xcalloc(dentry_buckets, sizeof *dentries);
    struct inode *root = inode_new(S_IFDIR | 0755, NULL);
    root->lookups = 1;
    int ret = 1;
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se)
        goto out;
    if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, opts.mountpoint) != 0)
        goto destroy;
    fuse_daemonize(opts.foreground);
    if (opts.singlethread) {
        ret = fuse_session_loop(se);
    } else {
        struct fuse_loop_config *cfg = fuse_loop_cfg_create();
        // Idle threads are kept, never ended: a thread that exits takes its CPU time
        // out of /proc/PID/task, where compare-fs reads it.
        unsigned threads = opts.max_threads ? opts.max_threads : 10;
        fuse_loop_cfg_set_max_threads(cfg, threads);
        fuse_loop_cfg_set_idle_threads(cfg, threads);
        fuse_loop_cfg_set_clone_fd(cfg, opts.clone_fd);
        ret = fuse_session_loop_mt(se, cfg);
        fuse_loop_cfg_destroy(cfg);
    }
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
destroy:
    fuse_session_destroy(se);
out:
    free(opts.mountpoint);
    fuse_opt_free_args(&args);
    return ret ? 1 : 0;
}
