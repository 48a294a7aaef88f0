// Push stage: writing a result to the registry, checked before and after.

package imagepatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// holds is what dst holds now: its digest, or false when it does not exist.
func (p *Patcher) holds(ctx context.Context, sess *session, dst name.Tag) (v1.Hash, bool, error) {
	d, err := remote.Head(dst, sess.opts(ctx)...)
	switch {
	case err == nil:
		return d.Digest, true, nil
	case notFound(err):
		return v1.Hash{}, false, nil
	}
	return v1.Hash{}, false, fmt.Errorf("check %s: %w", dst, err)
}

// notFound is a registry's 404: no such tag, manifest or repository.
func notFound(err error) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound
}

// push writes the result, checking just before that the tag is free (or
// holds this very result: then it is unchanged) and just after that it
// holds this result: a registry has no conditional write, so another
// writer (a second run, a second webhook replica) may fill it meanwhile,
// and then this run says so instead of reporting success. An image needs
// only its config and manifest written, and the patch layer once per
// repository: its base layers are the source's, in the same repository.
// An index goes through remote.WriteIndex.
func (p *Patcher) push(ctx context.Context, sess *session, b *built) (Action, error) {
	got, ok, err := p.holds(ctx, sess, b.dst)
	if err == nil && ok && got != b.digest {
		// Another result of this patch there: the source's tag moved,
		// and b goes under its base's digest's name instead.
		var moved bool
		if moved, err = p.moved(ctx, sess, b, got); err == nil && moved {
			got, ok, err = p.holds(ctx, sess, b.dst)
		}
	}
	switch {
	case err != nil:
		return ActionFailed, err
	case ok && got == b.digest:
		return ActionUnchanged, nil
	case ok:
		return ActionRefused, errors.New(taken(b.dst, got))
	}
	dst := b.dst
	if err := p.write(ctx, sess, dst, b); err != nil {
		return ActionFailed, err
	}
	switch got, ok, err := p.holds(ctx, sess, dst); {
	case err != nil:
		return ActionFailed, fmt.Errorf("after the push: %w", err)
	case !ok || got != b.digest:
		return ActionRefused, fmt.Errorf("%s holds %s after this run pushed %s: another writer pushed it at the same time, and theirs is there", dst, got, b.digest)
	}
	return ActionPush, nil
}

func (p *Patcher) write(ctx context.Context, sess *session, dst name.Tag, b *built) error {
	if b.idx != nil {
		// WriteIndex looks for each blob and manifest first: again is cheap.
		if err := settle(ctx, func() error { return remote.WriteIndex(dst, b.idx, sess.opts(ctx)...) }); err != nil {
			return fmt.Errorf("push %s: %w", dst, err)
		}
		return nil
	}
	// The patch layer is the same for every tag: the session's pusher
	// looks for it, and uploads it, once per repository.
	if b.layer != nil {
		if err := sess.pusher.Upload(ctx, dst.Context(), b.layer); err != nil {
			return fmt.Errorf("upload the patch layer to %s: %w", dst.Context(), err)
		}
	}
	cl, err := partial.ConfigLayer(b.img)
	if err != nil {
		return err
	}
	if err := p.uploadConfig(ctx, sess, dst.Context(), cl); err != nil {
		return fmt.Errorf("upload the config of %s: %w", dst, err)
	}
	// Put, not Push: the tag was just seen free.
	if err := settle(ctx, func() error { return sess.pusher.Put(ctx, dst, b.img) }); err != nil {
		return fmt.Errorf("push %s: %w", dst, err)
	}
	return nil
}

// settleWaits are the pauses before each new try of a manifest write that
// a registry refused for a blob it could not read (0.75 s in all).
var settleWaits = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}

// settle runs a manifest write, and runs it again while the registry
// refuses it for a blob that this run has just uploaded: a registry that
// rewrites a blob's link in place (distribution 2.x's filesystem driver
// truncates it, then writes) says a blob is unknown, or its digest
// invalid, while another writer (a second webhook replica patching the
// same source) uploads the same blob.
func settle(ctx context.Context, write func() error) error {
	err := write()
	for _, wait := range settleWaits {
		if err == nil || !blobUnread(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		err = write()
	}
	return err
}

// blobUnread says a registry refused a manifest only for the blobs or
// manifests it references: every code it gave is one of those.
func blobUnread(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return false
	}
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestBlobUnknownErrorCode, transport.BlobUnknownErrorCode, transport.DigestInvalidErrorCode:
		default:
			return false
		}
	}
	return true
}

// uploadConfig writes a config blob to repo. A config is new with each
// result (it records the base), so it is not looked for first: it goes
// up in one request where the registry takes a single POST, else in two
// (a POST, and a PUT with the body), where go-containerregistry's writer
// makes four (HEAD, POST, PATCH, PUT); uploading one that is there
// already writes the same bytes again. If that fails for any reason, or
// the patcher has no transport of its own (WithRegistry),
// go-containerregistry's writer does it, with its retries.
func (p *Patcher) uploadConfig(ctx context.Context, sess *session, repo name.Repository, cl v1.Layer) error {
	if p.rt != nil {
		bc, err := p.blobClient(ctx, sess, repo)
		if err == nil {
			err = bc.put(ctx, repo, cl)
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	return sess.pusher.Upload(ctx, repo, cl)
}

// blobClient is a session's client for the patcher's own uploads to one
// repository: pinged, and its token fetched, once.
type blobClient struct {
	once   sync.Once
	client *http.Client
	err    error
	// The registry took no single POST: uploads go up in two requests.
	twoSteps atomic.Bool
}

func (p *Patcher) blobClient(ctx context.Context, sess *session, repo name.Repository) (*blobClient, error) {
	v, _ := sess.blobs.LoadOrStore(repo.String(), &blobClient{})
	bc := v.(*blobClient)
	bc.once.Do(func() {
		var auth authn.Authenticator = authn.Anonymous
		if p.keys != nil {
			if auth, bc.err = authn.Resolve(ctx, p.keys, repo); bc.err != nil {
				return
			}
		}
		var rt http.RoundTripper
		if rt, bc.err = transport.NewWithContext(ctx, repo.Registry, auth, p.rt, []string{repo.Scope(transport.PushScope)}); bc.err != nil {
			return
		}
		bc.client = &http.Client{Transport: rt, CheckRedirect: sameHost}
	})
	if bc.err != nil {
		sess.blobs.CompareAndDelete(repo.String(), bc) // the next caller tries again
	}
	return bc, bc.err
}

// sameHost refuses a redirect to another host: the fallback, whose
// writer weighs those, takes over.
func sameHost(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		return fmt.Errorf("redirected from %s to %s", via[0].URL.Host, req.URL.Host)
	}
	return nil
}

// singlePostMax bounds the blobs offered in a single POST: a registry
// that takes none answers without reading the body, and a Go server
// (distribution's) reads at most 256 KiB of a body left unread before
// it closes the connection.
const singlePostMax = 256 << 10

// put uploads l to repo monolithically: a single POST with its digest and
// the body (the distribution spec's single POST, which registries MAY
// take: go-containerregistry's does), or a POST to start an upload and a
// PUT of the body with its digest to finish it. A registry that takes no
// single POST answers it, as the spec asks, as a POST that starts an
// upload (distribution's: 202 and a Location, the body left unread): the
// body goes again with the PUT, and from then on the session starts each
// upload with an empty POST.
func (bc *blobClient) put(ctx context.Context, repo name.Repository, l v1.Layer) error {
	c := bc.client
	h, err := l.Digest()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	body, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return err
	}
	start := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: fmt.Sprintf("/v2/%s/blobs/uploads/", repo.RepositoryStr())}
	single := !bc.twoSteps.Load() && len(body) <= singlePostMax
	var offer io.Reader
	if single {
		start.RawQuery = url.Values{"digest": {h.String()}}.Encode()
		offer = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, start.String(), offer)
	if err != nil {
		return err
	}
	if single {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	if single && resp.StatusCode == http.StatusCreated {
		return done(resp, http.StatusCreated)
	}
	if single {
		// Not taken: a 202 is an upload started instead, which the PUT
		// finishes; any other answer fails this upload (the fallback
		// makes it). Either way the next starts with an empty POST.
		bc.twoSteps.Store(true)
	}
	if err := done(resp, http.StatusAccepted); err != nil {
		return err
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("start an upload: no usable Location (%q)", resp.Header.Get("Location"))
	}
	// A path, or a URL on the registry itself; elsewhere, the fallback decides.
	u := resp.Request.URL.ResolveReference(loc)
	if u.Host != resp.Request.URL.Host || u.Scheme != resp.Request.URL.Scheme {
		return fmt.Errorf("start an upload: Location %s is not on %s", u.Redacted(), resp.Request.URL.Host)
	}
	q := u.Query()
	q.Set("digest", h.String())
	u.RawQuery = q.Encode()
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if resp, err = c.Do(req); err != nil {
		return err
	}
	return done(resp, http.StatusCreated)
}

// done checks an answer's status and closes it, its body read (at most
// 64 KiB of it) so that the connection is kept.
func done(resp *http.Response, want int) error {
	defer resp.Body.Close()
	err := transport.CheckError(resp, want)
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return err
}
