package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Uploads that run at once cannot pass a dir-backed volume's limit
// together (issue 27). Before, each checked the free space of one walk and
// then wrote: all eight 6 MiB uploads "fit" in 16 MiB.
func TestVolumeConcurrentUploadsKeepTheLimit(t *testing.T) {
	h, _ := volHarness(t, 0)
	v := createVolume(t, h, `{"name":"shared","sizeMB":16}`)
	const uploads, each = 8, 6 << 20
	release := make(chan struct{})
	var wg sync.WaitGroup
	codes := make([]int, uploads)
	for i := range uploads {
		wg.Go(func() {
			pr, pw := io.Pipe()
			go func() {
				<-release
				_, _ = io.Copy(pw, bytes.NewReader(make([]byte, each)))
				pw.Close()
			}()
			req, err := http.NewRequest("PUT", fmt.Sprintf("%s/volumecontent/%s/file?path=/f%d", h.srv.URL, v.VolumeID, i), pr)
			if err != nil {
				t.Error(err)
				return
			}
			req.ContentLength = each
			req.Header.Set("Authorization", "Bearer "+v.Token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	// Every request is past its space check before any body arrives.
	time.Sleep(500 * time.Millisecond)
	close(release)
	wg.Wait()
	ok := 0
	for i, c := range codes {
		switch c {
		case http.StatusCreated:
			ok++
		case http.StatusInsufficientStorage:
		default:
			t.Errorf("upload %d: %d, want 201 or 507", i, c)
		}
	}
	if ok != 2 {
		t.Fatalf("%d uploads of 6 MiB were written to a 16 MiB volume, want 2", ok)
	}
	st, data := content(t, h, "GET", "/volumecontent/"+v.VolumeID+"/dir?path=/", v.Token, nil)
	if st != http.StatusOK {
		t.Fatalf("list: %d %s", st, data)
	}
}
