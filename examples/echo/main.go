// Command echo shows httplimit in an Echo application: echo.WrapMiddleware takes
// httplimit's func(http.Handler) http.Handler as it is. This directory is its own Go
// module, so Echo never enters sluice's go.mod.
//
//	cd examples/echo && go run . &
//	for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code}\n' localhost:8080/search?q=x; done   # 200 200 200 429
package main

import (
	"log"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memory"
)

// newServer builds the demo application on store.
func newServer(store sluice.Limiter) (*echo.Echo, error) {
	mw, err := httplimit.New(httplimit.Config{
		Limiter: store,
		Policies: []httplimit.Policy{
			{Name: "per-ip", Limit: sluice.PerSecond(10)},
			// Routes are matched as http.ServeMux patterns, independently of Echo's router.
			{Name: "search", Route: "GET /search", Limit: sluice.PerMinute(3)},
		},
	})
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner = true
	e.Use(echo.WrapMiddleware(mw.Handler))
	e.GET("/search", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"query": c.QueryParam("q"), "results": []string{}})
	})
	e.GET("/hello/:name", func(c echo.Context) error {
		return c.String(http.StatusOK, "hello "+c.Param("name")+"\n")
	})
	return e, nil
}

func main() {
	store := memory.New()
	defer store.Close()
	e, err := newServer(store)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(e.Start("localhost:8080"))
}
